"""Set up the test provider's database (run with its settings):

python -m tests.oidc_provider.seed client CLIENT_ID SECRET REDIRECT_URI
python -m tests.oidc_provider.seed user NAME PASSWORD EMAIL [GROUP ...]
python -m tests.oidc_provider.seed groups NAME [GROUP ...]
python -m tests.oidc_provider.seed key     (prints the provider's private signing key, PEM)
"""

import sys

import django


def main(argv: list[str]) -> None:
    django.setup()
    from django.contrib.auth.models import Group, User
    from oidc_provider.models import Client, ResponseType, RSAKey

    command, args = argv[0], argv[1:]
    if command == "client":
        client_id, secret, redirect_uri = args
        client, _ = Client.objects.update_or_create(
            client_id=client_id,
            defaults={
                "name": "GPU Ledger",
                "client_type": "confidential",
                "client_secret": secret,
                "jwt_alg": "RS256",
                "require_consent": False,
                "reuse_consent": True,
            },
        )
        client.redirect_uris = [redirect_uri]
        client.scope = ["openid", "email", "profile", "groups"]
        client.save()
        client.response_types.set([ResponseType.objects.get(value="code")])
    elif command == "user":
        name, password, email, *groups = args
        user, _ = User.objects.get_or_create(username=name)
        user.email = email
        user.set_password(password)
        user.save()
        user.groups.set([Group.objects.get_or_create(name=group)[0] for group in groups])
    elif command == "groups":
        name, *groups = args
        user = User.objects.get(username=name)
        user.groups.set([Group.objects.get_or_create(name=group)[0] for group in groups])
    elif command == "key":
        sys.stdout.write(RSAKey.objects.order_by("id").first().key)
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
