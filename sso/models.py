"""Who a dashboard user is at the identity provider: the provider's issuer and `sub`."""

from django.conf import settings
from django.db import models
from django.db.models import Q


class OidcIdentity(models.Model):
    """One user of the identity provider `issuer`, known there as `sub` (the subject: stable and
    never reassigned, unlike an e-mail address). A user without a row is a local account."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="oidc_identity"
    )
    issuer = models.CharField(max_length=500)
    sub = models.CharField(max_length=255)
    created_at = models.DateTimeField(auto_now_add=True)
    last_login_at = models.DateTimeField(null=True, blank=True)
    # the roles claim's values at the last sign-in, as the provider sent them (for the people page)
    last_claim_values = models.JSONField(default=list, blank=True)

    class Meta:
        verbose_name_plural = "OIDC identities"
        constraints = [
            models.UniqueConstraint(fields=["issuer", "sub"], name="oidc_identity_issuer_sub"),
            models.CheckConstraint(
                condition=Q(issuer__gt="") & Q(sub__gt=""), name="oidc_identity_not_empty"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.sub} at {self.issuer}"
