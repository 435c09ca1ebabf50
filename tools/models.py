"""The tool side's tables: idempotency keys, and the support desk the built-in tools act on.

Every business row carries the idempotency key that made it under a unique constraint, so even a
bug in the key layer cannot produce a second ticket, comment or email for one key.
"""

from django.db import models
from django.db.models import Q

from teams.fields import TeamField

KEY_MAX_LENGTH = 400  # a journal key is {run uuid}:{index}:{tool name ≤ 200}:{32 hex}


class KeyStatus(models.TextChoices):
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"
    FAILED = "failed"


class IdempotencyKey(models.Model):
    """One tool execution per key: reserved (in_progress) before it runs, its response after.

    `attempt` is the lock's fencing token: a takeover (a supervisor said "retry") increments it,
    and completion is a guarded update on it, so a zombie execution cannot overwrite the record.
    """

    key = models.CharField(max_length=KEY_MAX_LENGTH, unique=True)
    tool = models.CharField(max_length=200)
    request_hash = models.CharField(max_length=64)
    state = models.CharField(max_length=20, choices=KeyStatus.choices)
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    response = models.JSONField(null=True, blank=True)
    attempt = models.PositiveIntegerField(default=1)
    actor = models.CharField(max_length=200, blank=True, default="")
    locked_at = models.DateTimeField()
    created_at = models.DateTimeField()
    completed_at = models.DateTimeField(null=True, blank=True)
    # requests answered from the store instead of executing: the duplicates this key prevented
    replay_count = models.PositiveIntegerField(default=0, db_default=0)
    # a tool's own exception text: for the log and the dashboard, never sent to callers
    internal_error = models.TextField(blank=True, default="", db_default="")
    # a free-form key (a `tools:direct` token's, naming no journal step) belongs to the token that
    # made it and the agents that token was limited to (null: every agent); only tokens that may
    # see those agents read or replay it. A journal step's key has no owner: its run decides.
    owner_token = models.ForeignKey(
        "runs.WorkerToken", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    owner_agents = models.JSONField(null=True, blank=True)
    # the team of the caller that reserved it; the key itself stays unique over every team (a
    # journal key starts with its run's id, unique everywhere)
    team = TeamField()

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(state__in=KeyStatus.values), name="idempotency_state_valid"
            ),
            models.CheckConstraint(
                condition=Q(state=KeyStatus.IN_PROGRESS)
                | Q(completed_at__isnull=False, status_code__isnull=False),
                name="idempotency_finished_has_response",
            ),
            models.CheckConstraint(
                condition=Q(owner_agents__isnull=True) | Q(owner_token__isnull=False),
                name="idempotency_owner_agents_have_a_token",
            ),
        ]
        indexes = [
            models.Index(
                fields=["completed_at"],
                condition=~Q(state=KeyStatus.IN_PROGRESS),
                name="idempotency_prunable_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.key} ({self.state})"


class TicketStatus(models.TextChoices):
    OPEN = "open"
    CLOSED = "closed"


class Ticket(models.Model):
    customer = models.EmailField()
    subject = models.CharField(max_length=200)
    body = models.TextField()
    status = models.CharField(
        max_length=10, choices=TicketStatus.choices, default=TicketStatus.OPEN
    )
    resolution = models.TextField(blank=True, default="")
    created_by_key = models.CharField(max_length=KEY_MAX_LENGTH, null=True, blank=True)
    closed_by_key = models.CharField(max_length=KEY_MAX_LENGTH, null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    closed_at = models.DateTimeField(null=True, blank=True)
    team = TeamField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["created_by_key"], name="ticket_created_by_key_unique"),
            models.UniqueConstraint(fields=["closed_by_key"], name="ticket_closed_by_key_unique"),
            models.CheckConstraint(
                condition=Q(status__in=TicketStatus.values), name="ticket_status_valid"
            ),
            models.CheckConstraint(
                condition=Q(status=TicketStatus.OPEN, closed_at__isnull=True)
                | Q(status=TicketStatus.CLOSED, closed_at__isnull=False),
                name="ticket_closed_has_closed_at",
            ),
        ]
        indexes = [models.Index(fields=["customer", "status"], name="ticket_customer_status_idx")]
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"#{self.pk} {self.subject}"


class TicketComment(models.Model):
    ticket = models.ForeignKey(Ticket, on_delete=models.CASCADE, related_name="comments")
    body = models.TextField()
    idempotency_key = models.CharField(max_length=KEY_MAX_LENGTH, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    team = TeamField(db_constraint=False, db_index=False)  # its ticket's (teams_team_fill checks)

    def __str__(self) -> str:
        return f"comment {self.pk} on #{self.ticket_id}"


class OutboundEmail(models.Model):
    """An email handed to the mail backend; written in the transaction that completes its key."""

    to = models.EmailField()
    subject = models.CharField(max_length=300)
    body = models.TextField()
    ticket = models.ForeignKey(Ticket, null=True, blank=True, on_delete=models.SET_NULL)
    message_id = models.CharField(max_length=200, unique=True)
    idempotency_key = models.CharField(max_length=KEY_MAX_LENGTH, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    team = TeamField()

    def __str__(self) -> str:
        return f"{self.message_id} to {self.to}"


class KnowledgeArticle(models.Model):
    slug = models.SlugField(max_length=100, unique=True)
    title = models.CharField(max_length=200)
    body = models.TextField()
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return self.title


class McpToolMark(models.TextChoices):
    """What an admin says an MCP upstream tool is (empty: nobody has said; the hint stands)."""

    NONE = "", "as the upstream hints"
    READ = "read", "read"
    WRITE = "write", "write"


class McpTool(models.Model):
    """A tool an `intentledger mcp proxy` found on an upstream MCP server, and what it is.

    `read_only_hint` is the upstream's own `readOnlyHint` annotation, as last reported: a hint
    anyone can write, so an admin may overrule it with `mark` (read or write). The proxy treats
    a tool as a read when it is marked read, or not marked and hinted read.
    """

    server = models.CharField(max_length=200)
    name = models.CharField(max_length=200)
    read_only_hint = models.BooleanField(default=False)
    mark = models.CharField(max_length=5, choices=McpToolMark.choices, blank=True, default="")
    marked_by = models.CharField(max_length=150, blank=True, default="")
    marked_at = models.DateTimeField(null=True, blank=True)
    first_seen = models.DateTimeField()
    last_seen = models.DateTimeField()
    team = TeamField()  # the team of the token whose proxy reported it

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["team", "server", "name"], name="mcp_tool_server_name_unique"
            ),
            models.CheckConstraint(
                condition=Q(mark__in=McpToolMark.values), name="mcp_tool_mark_valid"
            ),
            models.CheckConstraint(
                condition=Q(mark="") | Q(marked_at__isnull=False, marked_by__gt=""),
                name="mcp_tool_mark_has_who_and_when",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.server}/{self.name}"

    @property
    def effect(self) -> str:
        """What the proxy makes of it without command-line overrides."""
        if self.mark:
            return self.mark
        return "read" if self.read_only_hint else "write"
