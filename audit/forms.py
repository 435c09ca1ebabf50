from django import forms

from audit.models import ExportFormat
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
