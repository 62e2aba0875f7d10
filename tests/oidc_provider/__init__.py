"""A real OpenID Connect provider for the sign-in tests: django-oidc-provider in a Django process
of its own (``settings.py``), started on loopback by ``tests/accounts/conftest.py``.

It issues RS256-signed ID tokens from its own key, serves discovery, JWKS, token (code and
refresh grants) and userinfo, and puts the provider-side user's Django groups in a ``groups``
claim (``claims.py``). ``seed.py`` creates its client and users and changes their groups.
"""
