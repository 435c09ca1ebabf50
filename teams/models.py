"""A team owns runs, tokens, policies and the people who supervise, administer and audit them."""

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models
from django.utils import timezone

DEFAULT_TEAM_SLUG = "default"
# teams/0002 makes `default` the first team, so in a new database its id is 1; code finds it by its
# slug, only the test suite (which makes it again after each flush) relies on the id
DEFAULT_TEAM_ID = 1
SLUG_PATTERN = r"^[a-z0-9][a-z0-9-]{0,49}$"


class Team(models.Model):
    """One workspace; `default` holds everything that existed before teams."""

    slug = models.CharField(
        max_length=50,
        unique=True,
        validators=[RegexValidator(SLUG_PATTERN, "lower-case letters, digits and hyphens")],
    )
    name = models.CharField(max_length=200)
    created_at = models.DateTimeField(default=timezone.now)
    # the team's queue: how long an item may wait before it is escalated (None: the setting
    # REVIEW_SLA_SECONDS), and where the escalation goes ("": the team's supervisors)
    review_sla_minutes = models.PositiveIntegerField(null=True, blank=True)
    escalation_email = models.EmailField(blank=True, default="")

    class Meta:
        ordering = ["slug"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(slug__regex=SLUG_PATTERN), name="team_slug_format"
            ),
            models.CheckConstraint(
                condition=models.Q(review_sla_minutes__isnull=True)
                | models.Q(review_sla_minutes__gte=1),
                name="team_sla_positive",
            ),
        ]

    def __str__(self) -> str:
        return self.slug


def default_team() -> Team:
    """The `default` team (made by teams/0002; made again if a test's flush took it)."""
    team, _ = Team.objects.get_or_create(
        slug=DEFAULT_TEAM_SLUG, defaults={"id": DEFAULT_TEAM_ID, "name": "Default"}
    )
    return team


class Role(models.TextChoices):
    """A person's role is held per team; each maps to one of the dashboard's groups of
    permissions (dashboard.roles.GROUP_PERMISSIONS)."""

    SUPERVISOR = "supervisor"
    ADMIN = "admin"
    AUDITOR = "auditor"


class Membership(models.Model):
    """A person holds `role` in `team`."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="team_roles"
    )
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="memberships")
    role = models.CharField(max_length=20, choices=Role.choices)
    granted_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "team", "role"], name="membership_once"),
            models.CheckConstraint(
                condition=models.Q(role__in=[r.value for r in Role]), name="membership_role_known"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.user_id}:{self.team_id}:{self.role}"
