import re

from django import forms

from audit.models import ExportFormat, IncidentSeverity, IncidentStatus
from review.forms import note_field
from runs.constants import RunStatus


class ExportForm(forms.Form):
    created_from = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    created_to = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    agent = forms.CharField(required=False, max_length=100)
    status = forms.ChoiceField(required=False, choices=[("", "any status"), *RunStatus.choices])
    format = forms.ChoiceField(
        choices=[
            (ExportFormat.JSONL, "JSONL (verifiable)"),
            (ExportFormat.CSV, "CSV (one step per row)"),
        ],
        initial=ExportFormat.JSONL,
    )

    def clean(self) -> dict:
        data = super().clean() or {}
        start, end = data.get("created_from"), data.get("created_to")
        if start and end and end < start:
            self.add_error("created_to", "The end date is before the start date.")
        return data


class RetentionForm(forms.Form):
    enabled = forms.BooleanField(
        required=False,
        widget=forms.CheckboxInput(attrs={"style": "width:auto;display:inline;margin:0"}),
    )
    keep_days = forms.IntegerField(min_value=1, max_value=36500)


class AcknowledgeForm(forms.Form):
    note = forms.CharField(max_length=2000, widget=forms.Textarea(attrs={"rows": 2}))


class LegalHoldForm(forms.Form):
    """Put a run on legal hold (`hold=on`) or lift it (`hold=off`); the note says why."""

    hold = forms.ChoiceField(choices=[("on", "put on legal hold"), ("off", "lift the hold")])
    note = note_field(
        "A note is required: say why (the matter, the request).",
        forms.TextInput(attrs={"size": 40}),
    )


class EvidencePackForm(forms.Form):
    period_from = forms.DateField(widget=forms.DateInput(attrs={"type": "date"}))
    period_to = forms.DateField(widget=forms.DateInput(attrs={"type": "date"}))
    agents = forms.CharField(
        required=False,
        max_length=2000,
        help_text="Agent names separated by commas; empty: every agent.",
    )
    team = forms.SlugField(
        required=False,
        max_length=50,
        help_text="The team whose pack this is (a pack is one team's); empty: your team.",
    )

    def clean(self) -> dict:
        data = super().clean() or {}
        start, end = data.get("period_from"), data.get("period_to")
        if start and end and end < start:
            self.add_error("period_to", "The end date is before the start date.")
        return data


class IncidentOpenForm(forms.Form):
    title = forms.CharField(max_length=200)
    severity = forms.ChoiceField(choices=IncidentSeverity.choices)
    aware_at = forms.DateTimeField(
        help_text="When the organisation became aware (UTC).",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
    )
    runs = forms.CharField(
        help_text="Run ids, separated by spaces, commas or lines.",
        widget=forms.Textarea(attrs={"rows": 2}),
    )
    notes = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 3}))

    def run_ids(self) -> list[str]:
        return [r for r in re.split(r"[\s,]+", self.cleaned_data["runs"]) if r]


class IncidentUpdateForm(forms.Form):
    status = forms.ChoiceField(choices=IncidentStatus.choices)
    notes = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 3}))
    note = forms.CharField(
        required=False, max_length=2000, help_text="What changed and why (the audit log keeps it)."
    )
