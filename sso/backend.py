"""mozilla-django-oidc's backend, told the discovered endpoints and made strict about the ID token.

The library exchanges the code (with the PKCE verifier), fetches the issuer's JWKS, checks the
signature and the nonce. It leaves the audience unchecked (`verify_aud: False`) and the issuer
too; `_verify_jws` here checks signature, issuer, audience (and `azp` when there are several),
expiry and issue time, and requires each claim. The user is then matched by issuer and `sub`
(sso.services), not by e-mail as the library would.

This backend is not in AUTHENTICATION_BACKENDS: the callback view calls it, and the session it
opens is an ordinary ModelBackend session, so a signed-in provider user costs each request what a
local user does (no provider call, no token refresh).
"""

from typing import Any

import jwt
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.utils import import_from_settings

from sso.conf import Provider, SsoSettings
from sso.services import sso_sign_in


class TokenRejected(Exception):
    """The ID token (or the userinfo answer) failed a check; the message says which. Not a
    SuspiciousOperation: the library swallows those from its user lookup."""


def library_settings(conf: SsoSettings, provider: Provider | None = None) -> dict[str, Any]:
    """mozilla-django-oidc's settings, from ours and the discovery document."""
    values: dict[str, Any] = {
        "OIDC_RP_CLIENT_ID": conf.client_id,
        "OIDC_RP_CLIENT_SECRET": conf.client_secret,
        "OIDC_RP_SCOPES": conf.scopes,
        "OIDC_RP_SIGN_ALGO": conf.sign_algorithms[0] if conf.sign_algorithms else "RS256",
        "OIDC_RP_IDP_SIGN_KEY": None,
        "OIDC_USE_NONCE": True,
        "OIDC_USE_PKCE": True,
        "OIDC_PKCE_CODE_CHALLENGE_METHOD": "S256",
        "OIDC_AUTHENTICATION_CALLBACK_URL": "sso:callback",
        "OIDC_REDIRECT_FIELD_NAME": "next",
        "OIDC_TIMEOUT": conf.timeout_seconds,
        "OIDC_STORE_ACCESS_TOKEN": False,
        "OIDC_STORE_ID_TOKEN": False,
        "OIDC_CREATE_USER": True,
    }
    if provider is not None:
        values |= {
            "OIDC_OP_AUTHORIZATION_ENDPOINT": provider.authorization_endpoint,
            "OIDC_OP_TOKEN_ENDPOINT": provider.token_endpoint,
            "OIDC_OP_USER_ENDPOINT": provider.userinfo_endpoint,
            "OIDC_OP_JWKS_ENDPOINT": provider.jwks_uri,
            "OIDC_TOKEN_USE_BASIC_AUTH": "client_secret_basic" in provider.token_auth_methods
            or "client_secret_post" not in provider.token_auth_methods,
        }
    return values


class LedgerOIDCBackend(OIDCAuthenticationBackend):
    def __init__(self, conf: SsoSettings, provider: Provider) -> None:
        self.conf = conf
        self.provider = provider
        self.values = library_settings(conf, provider)
        super().__init__()
        self.sign_in: Any = None  # what sso_sign_in returned, for the view's audit and page

    def get_settings(self, attr: str, *args: Any) -> Any:  # type: ignore[override]
        if attr in self.values:
            return self.values[attr]
        return import_from_settings(attr, *args)

    def _verify_jws(self, payload: bytes, key: Any) -> dict[str, Any]:
        try:
            header = jwt.get_unverified_header(payload)
        except jwt.PyJWTError as exc:
            raise TokenRejected(f"The ID token is not a JWT ({exc}).") from exc
        alg = header.get("alg")
        if alg not in self.conf.sign_algorithms:
            raise TokenRejected(f"The ID token is signed with {alg!r}, not an allowed algorithm.")
        try:
            claims: dict[str, Any] = jwt.decode(
                payload,
                key,
                algorithms=[alg],
                audience=self.conf.client_id,
                issuer=self.provider.issuer,
                leeway=30,
                options={"require": ["iss", "aud", "exp", "iat", "sub"]},
            )
        except jwt.ExpiredSignatureError as exc:
            raise TokenRejected("The ID token has expired.") from exc
        except jwt.InvalidAudienceError as exc:
            raise TokenRejected(
                f"The ID token is for another application (audience), not {self.conf.client_id!r}."
            ) from exc
        except jwt.InvalidIssuerError as exc:
            raise TokenRejected(
                f"The ID token comes from another issuer, not {self.provider.issuer!r}."
            ) from exc
        except jwt.InvalidSignatureError as exc:
            raise TokenRejected("The ID token's signature does not verify.") from exc
        except jwt.PyJWTError as exc:
            raise TokenRejected(f"The ID token was refused: {exc}.") from exc
        audiences = claims["aud"] if isinstance(claims["aud"], list) else [claims["aud"]]
        if len(audiences) > 1 and claims.get("azp") != self.conf.client_id:
            raise TokenRejected("The ID token names several audiences and was not issued to us.")
        return claims

    def get_userinfo(self, access_token: str, id_token: str, payload: dict[str, Any]) -> Any:
        """The ID token's claims, with the userinfo endpoint's on top (providers put groups in
        either); the two must be about the same subject."""
        claims = dict(payload)
        if self.provider.userinfo_endpoint and access_token:
            info = super().get_userinfo(access_token, id_token, payload)
            if info.get("sub") != payload.get("sub"):
                raise TokenRejected("The userinfo answer is about another subject.")
            claims |= {k: v for k, v in info.items() if k not in ("iss", "aud", "exp", "iat")}
        return claims

    def get_or_create_user(self, access_token: str, id_token: str, payload: dict[str, Any]) -> Any:
        claims = self.get_userinfo(access_token, id_token, payload)
        self.sign_in = sso_sign_in(conf=self.conf, issuer=self.provider.issuer, claims=claims)
        return self.sign_in.user
