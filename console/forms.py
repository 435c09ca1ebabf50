"""Console forms: shapes only (the services decide what a run allows)."""

from typing import Any

from django import forms

from review.forms import note_field

BULK_ACTIONS = [("cancel", "cancel"), ("resume", "resume")]


def _note() -> forms.CharField:
    return note_field("A note is required: say why.", forms.TextInput(attrs={"size": 40}))


class CancelForm(forms.Form):
    note = _note()


WRITE_CHOICE_PREFIX = "write:"  # write:<tool name> = hold | again, one per tool


class ForkForm(forms.Form):
    index = forms.IntegerField(
        min_value=0,
        max_value=2**31 - 1,
        label="Copy steps before",
        error_messages={"min_value": "A fork copies 0 or more steps."},
    )
    note = _note()

    def clean(self) -> dict[str, Any]:
        """The per-tool choices (`write:<tool>` fields), as given: run_fork decides."""
        cleaned = super().clean() or {}
        cleaned["writes"] = {
            key.removeprefix(WRITE_CHOICE_PREFIX): str(value)
            for key, value in self.data.items()
            if key.startswith(WRITE_CHOICE_PREFIX)
        }
        return cleaned


class BulkForm(forms.Form):
    action = forms.ChoiceField(choices=BULK_ACTIONS)
    note = _note()
    expected = forms.IntegerField(min_value=0, widget=forms.HiddenInput)
