"""Sign-in with the company's identity provider, and who a signed-in user is.

- ``choices.py``: the roles a provider group maps to.
- ``models.py``: ``GroupRoleMapping`` (a group → a role, edited in the admin) and ``OidcIdentity``
  (which provider subject a user is, and the groups last seen for it).
- ``roles.py``: the roles a list of groups grants, and applying them to a user (leads, members,
  the finance group, staff with the quota-apply permission).
- ``oidc.py``: OpenID Connect with mozilla-django-oidc: discovery, the token checks (signature,
  issuer, audience, expiry), the backend that maps a provider subject to a user, and the views.
- ``middleware.py``: re-reads an open session's groups from the provider every
  ``GPULEDGER_OIDC_ROLE_TTL`` seconds, or ends the session.
- ``rbac.py``: optional Kubernetes RBAC visibility (SubjectAccessReview ``list pods``).
"""
