"""Dashboard forms: they validate input and produce clear messages; services do the writing."""

import json
import re
from typing import Any

from django import forms

from review.selectors import RunFilters
from review.services.policies import POLICY_FIELDS, RULE_FIELDS
from runs.constants import (
    AGENT_NAME_RULE,
    BUDGET_LIMITS,
    Resolution,
    RunStatus,
    agent_name_valid,
)
from runs.models import ApprovalRule, BudgetPolicy
from teams.scope import home_team_id


class RunFilterForm(forms.Form):
    status = forms.ChoiceField(required=False, choices=[("", "any status"), *RunStatus.choices])
    agent = forms.CharField(required=False, max_length=100)
    date_from = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    date_to = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    has_unknown = forms.BooleanField(required=False, label="has unknown steps")
    over_80 = forms.BooleanField(required=False, label="over 80% of a budget")
    legal_hold = forms.BooleanField(required=False, label="on legal hold")
    q = forms.CharField(
        required=False,
        max_length=200,
        label="Search",
        widget=forms.TextInput(
            attrs={"placeholder": "id or short id, ticket, external id, customer", "type": "search"}
        ),
    )
    page = forms.IntegerField(required=False, min_value=1, max_value=10_000)

    def filters(self) -> RunFilters:
        """The filters the form selects (none of an invalid form's)."""
        data = self.cleaned_data if self.is_valid() else {}
        return RunFilters(
            status=data.get("status") or "",
            agent=(data.get("agent") or "").strip(),
            date_from=data.get("date_from"),
            date_to=data.get("date_to"),
            has_unknown=bool(data.get("has_unknown")),
            over_80=bool(data.get("over_80")),
            legal_hold=bool(data.get("legal_hold")),
            q=(data.get("q") or "").strip(),
        )


def note_field(
    required: str = "A note is required: say what you checked and why.",
    widget: forms.Widget | None = None,
) -> forms.CharField:
    """The note a person gives with a decision or an action (the services require it too)."""
    return forms.CharField(
        required=True,
        max_length=4000,
        strip=True,
        error_messages={"required": required},
        widget=widget or forms.Textarea(attrs={"rows": 3}),
    )


AT_LEAST_ONE = "Must be at least 1."
ZERO_OR_MORE = "Must be 0 or more."
MORE_THAN_ZERO = "Must be more than 0, or empty for no cost limit."


def limits_worded_alike(
    form: forms.BaseForm,
    *,
    at_least_one: tuple[str, ...] = (),
    zero_or_more: tuple[str, ...] = (),
    cost: tuple[str, ...] = (),
) -> None:
    """One rule and one wording per budget limit on every form that takes limits (a policy, a
    run's raised limits): a minimum the field checks itself, so no other message contradicts it."""
    from django.core.validators import MinValueValidator

    for names, minimum, message in (
        (at_least_one, 1, AT_LEAST_ONE),
        (zero_or_more, 0, ZERO_OR_MORE),
    ):
        for name in names:
            field = form.fields[name]
            assert isinstance(field, forms.IntegerField)
            field.min_value = minimum
            field.validators = [
                v for v in field.validators if not isinstance(v, MinValueValidator)
            ] + [MinValueValidator(minimum, message)]
            field.widget.attrs["min"] = str(minimum)
    for name in cost:
        field = form.fields[name]
        assert isinstance(field, forms.DecimalField)
        field.min_value = None
        field.validators = [v for v in field.validators if not isinstance(v, MinValueValidator)]
        field.widget.attrs.pop("min", None)


def cost_checked(form: forms.BaseForm, data: dict[str, Any], name: str) -> None:
    cost = data.get(name)
    if cost is not None and cost <= 0:
        form.add_error(name, MORE_THAN_ZERO)


class ResolveForm(forms.Form):
    action = forms.ChoiceField(choices=Resolution.choices)
    note = note_field()
    confirm_repeat = forms.BooleanField(
        required=False, label="I understand the effect may happen twice"
    )
    result = forms.CharField(
        required=False,
        label="Observed result (JSON, optional)",
        widget=forms.Textarea(attrs={"rows": 3, "placeholder": '{"email": {"id": 42}}'}),
    )

    def clean_result(self) -> Any:
        raw = self.cleaned_data.get("result", "").strip()
        if not raw:
            return None
        try:
            return json.loads(raw)
        except json.JSONDecodeError as exc:
            raise forms.ValidationError(
                f"The observed result is not valid JSON: {exc.msg}."
            ) from exc


class ApproveForm(forms.Form):
    note = forms.CharField(required=False, max_length=4000, strip=True)


class DenyForm(forms.Form):
    note = forms.CharField(
        required=True,
        max_length=4000,
        strip=True,
        error_messages={"required": "A note is required to deny: say why it must not run."},
    )


class AuditedModelForm(forms.ModelForm):
    """An admin's edit of a setting: the model's fields and a note for the audit log."""

    note = forms.CharField(required=False, max_length=2000, label="Note (for the audit log)")


# the database's own words for the rule (one text: the form's refusal and the constraint's)
EXPIRY_RULE = next(
    str(c.violation_error_message)
    for c in ApprovalRule._meta.constraints
    if c.name == "approval_rule_expiry_sane"
)


class ApprovalRuleForm(AuditedModelForm):
    class Meta:
        model = ApprovalRule
        fields = list(RULE_FIELDS)  # what approval_rule_save takes
        labels = {
            "agent": "Agent (empty: every agent)",
            "tool_pattern": "Tool name pattern (* matches any text, e.g. email.*)",
            "approvals_required": "Approvals required",
            "expires_after_seconds": "Expires after (seconds, at least 60; empty: never)",
            "active": "Active",
        }
        widgets = {
            "approvals_required": forms.Select(choices=[(1, "1 person"), (2, "2 different people")])
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["tool_pattern"].error_messages["required"] = (
            "Name a tool, or a pattern such as email.*"
        )
        # the column is unsigned, so its own message would say "≥ 0" beside a label saying 60
        expiry = self.fields["expires_after_seconds"]
        expiry.error_messages["min_value"] = EXPIRY_RULE
        expiry.widget.attrs["min"] = 60

    def clean_agent(self) -> str:
        agent = (self.cleaned_data.get("agent") or "").strip()
        if agent and not agent_name_valid(agent):
            raise forms.ValidationError(f"Not an agent name: {agent} ({AGENT_NAME_RULE}).")
        return agent

    def clean_tool_pattern(self) -> str:
        pattern = (self.cleaned_data.get("tool_pattern") or "").strip()
        if not pattern:
            raise forms.ValidationError("Name a tool, or a pattern such as email.*")
        return pattern


ITEM = re.compile(r"^[0-9a-f-]{36}#[0-9]{1,6}$")
BULK_ACTIONS = [
    ("sent", "Mark as sent"),
    ("retry", "Retry (same key)"),
    ("abandon", "Abandon the runs"),
    ("approve", "Approve"),
    ("deny", "Deny"),
]


class BulkDecideForm(forms.Form):
    """Many queue items, one decision and one note (the service checks they belong together)."""

    items = forms.MultipleChoiceField(
        choices=[],
        widget=forms.CheckboxSelectMultiple,
        error_messages={"required": "Tick the items to decide."},
    )
    action = forms.ChoiceField(choices=BULK_ACTIONS)
    note = note_field()
    confirm_repeat = forms.BooleanField(required=False)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # any well-formed item id is a choice; the service says whether it can be decided
        raw = self.data.getlist("items") if hasattr(self.data, "getlist") else []
        items = self.fields["items"]
        assert isinstance(items, forms.MultipleChoiceField)
        items.choices = [(v, v) for v in raw if ITEM.match(str(v))]

    def clean_items(self) -> list[tuple[str, int]]:
        values = self.cleaned_data.get("items") or []
        if len(values) > 50:
            raise forms.ValidationError("Decide at most 50 items at once.")
        return [(v.split("#")[0], int(v.split("#")[1])) for v in values]


class WebhookForm(forms.Form):
    url = forms.CharField(max_length=500, label="Webhook URL (Slack-compatible, http or https)")
    secret = forms.CharField(
        max_length=200,
        label="Signing secret (HMAC-SHA256 of the body, header X-Agent-Ledger-Signature)",
    )

    def clean_url(self) -> str:
        url = self.cleaned_data["url"].strip()
        if not url.lower().startswith(("http://", "https://")):
            raise forms.ValidationError("A webhook URL starts with http:// or https://.")
        forms.URLField().clean(url)
        return url


class AssignForm(forms.Form):
    assignee = forms.CharField(max_length=150)


class DecideForm(forms.Form):
    action = forms.ChoiceField(choices=[("resume", "resume"), ("abandon", "abandon")])
    note = note_field()


class LimitsForm(forms.Form):
    steps = forms.IntegerField(required=False, min_value=1)
    tokens = forms.IntegerField(required=False, min_value=1)
    cost_usd = forms.DecimalField(required=False, min_value=0, max_digits=12, decimal_places=6)
    wall_seconds = forms.IntegerField(required=False, min_value=1)
    recoveries = forms.IntegerField(required=False, min_value=0)
    note = note_field()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        limits_worded_alike(
            self,
            at_least_one=("steps", "tokens", "wall_seconds"),
            zero_or_more=("recoveries",),
            cost=("cost_usd",),
        )

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        cost_checked(self, data, "cost_usd")
        if not self.errors and all(data.get(n) is None for n in BUDGET_LIMITS):
            raise forms.ValidationError("Give at least one new limit.")
        return data

    def limits(self) -> dict[str, Any]:
        return {k: v for k, v in self.cleaned_data.items() if k != "note" and v is not None}


class PolicyForm(AuditedModelForm):
    # asked only while another policy is the default (budget_policy_save wants the yes)
    replace_default = forms.BooleanField(required=False, label="Replace the default")
    confirmations = ("replace_default",)

    class Meta:
        model = BudgetPolicy
        fields = list(POLICY_FIELDS)  # what budget_policy_save takes
        labels = {
            "agent": "Agent (empty for none)",
            "is_default": "Default policy (for agents without their own)",
            "max_cost_usd": "Max cost (USD, empty for no limit)",
        }

    def clean_agent(self) -> str | None:
        agent = (self.cleaned_data.get("agent") or "").strip()
        if agent and not agent_name_valid(agent):
            raise forms.ValidationError(f"Not an agent name: {agent} ({AGENT_NAME_RULE}).")
        return agent or None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.team_id is None:  # a new policy: the team the person works in
            self.instance.team_id = home_team_id()
        default_now = BudgetPolicy.objects.filter(
            is_default=True, team_id=self.instance.team_id
        ).exclude(pk=self.instance.pk)
        named = default_now.values_list("name", flat=True).first()
        if named is None:
            del self.fields["replace_default"]
        else:
            self.fields[
                "replace_default"
            ].label = f"Replace the default: “{named}” then applies to no agent"
        limits_worded_alike(
            self,
            at_least_one=("max_steps", "max_tokens", "max_wall_seconds"),
            zero_or_more=("max_recoveries",),
            cost=("max_cost_usd",),
        )

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        # names and agents are unique per team (the team is not on the form, so Django's own
        # check of those constraints is skipped): said as Django says it
        for field, label in (("name", "Name"), ("agent", "Agent")):
            value = data.get(field)
            taken = BudgetPolicy.objects.filter(team_id=self.instance.team_id, **{field: value})
            if value and taken.exclude(pk=self.instance.pk).exists():
                self.add_error(field, f"Budget policy with this {label} already exists.")
        # whether a policy needs an agent is budget_policy_save's rule, not the form's
        cost_checked(self, data, "max_cost_usd")
        return data

    def validate_constraints(self) -> None:
        """Check constraints except the one-default rule: the service moves the default flag."""
        exclude = self._get_validation_exclusions()  # type: ignore[attr-defined]
        exclude.add("is_default")
        try:
            self.instance.validate_constraints(exclude=exclude)
        except forms.ValidationError as e:
            self._update_errors(e)  # type: ignore[attr-defined]


class TokenForm(forms.Form):
    name = forms.CharField(
        max_length=100,
        strip=True,
        error_messages={"required": "A token needs a name (which worker or host uses it)."},
    )
    agents = forms.CharField(
        required=False,
        max_length=1000,
        strip=True,
        help_text="Limit the token to these agents' runs (comma-separated); empty: every agent.",
    )
    tools_direct = forms.BooleanField(
        required=False,
        label="tools:direct",
        help_text="May invoke write tools under free-form keys (for callers that are not agents).",
    )

    def clean_agents(self) -> list[str]:
        names = [a.strip() for a in self.cleaned_data.get("agents", "").split(",") if a.strip()]
        bad = [a for a in names if not agent_name_valid(a)]
        if bad:
            raise forms.ValidationError(f"Not an agent name: {bad[0]} ({AGENT_NAME_RULE}).")
        return names
