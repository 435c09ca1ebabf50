"""The shell's forms: the audit log's filter and the people page's; they check shapes, the
services decide."""

from django import forms
from django.contrib.auth.validators import UnicodeUsernameValidator

from dashboard.roles import GROUP_PERMISSIONS


class AuditFilterForm(forms.Form):
    actor = forms.CharField(required=False, max_length=150)
    action = forms.CharField(required=False, max_length=60)
    target = forms.CharField(required=False, max_length=300)
    date_from = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    date_to = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    page = forms.IntegerField(required=False, min_value=1, max_value=10_000)


GROUP_CHOICES = [(name, name) for name in GROUP_PERMISSIONS]


class LocalUserForm(forms.Form):
    username = forms.CharField(max_length=150, validators=[UnicodeUsernameValidator()])
    email = forms.EmailField(required=False)
    password = forms.CharField(widget=forms.PasswordInput, strip=False)
    groups = forms.MultipleChoiceField(
        choices=GROUP_CHOICES, widget=forms.CheckboxSelectMultiple, required=False
    )


class GroupsForm(forms.Form):
    groups = forms.MultipleChoiceField(
        choices=GROUP_CHOICES, widget=forms.CheckboxSelectMultiple, required=False
    )
