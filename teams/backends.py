"""Permissions from the roles a person holds per team (teams.Membership).

A role grants the permissions of its dashboard group (dashboard.roles.GROUP_PERMISSIONS). Without an
object, `user.has_perm("review.resolve")` asks about the roles held in the teams the current
scope sees (teams.scope: the dashboard's is the person's own teams); with an object that carries
a team (`has_perm("review.resolve", step)`), about the role held in that object's team. An org
admin (superuser) holds every permission, as Django's own backend has it.
"""

from typing import Any

from django.contrib.auth.backends import ModelBackend

from dashboard.roles import ADMINS, AUDITORS, GROUP_PERMISSIONS, SUPERVISORS
from teams.models import Role
from teams.scope import current
from teams.services import roles_of

ROLE_GROUP = {Role.SUPERVISOR: SUPERVISORS, Role.ADMIN: ADMINS, Role.AUDITOR: AUDITORS}


def role_permissions(roles: Any) -> set[str]:
    return {
        f"review.{codename}" for role in roles for codename in GROUP_PERMISSIONS[ROLE_GROUP[role]]
    }


class TeamRoleBackend(ModelBackend):
    """Django's ModelBackend (passwords, a person's own permissions), with the group permissions
    replaced by the roles held per team."""

    def get_group_permissions(self, user_obj: Any, obj: Any = None) -> set[str]:
        if not user_obj.is_active or user_obj.is_anonymous:
            return set()
        roles = roles_of(user_obj)
        team = getattr(obj, "team_id", None) if obj is not None else None
        if team is not None:
            return role_permissions(roles.get(team, ()))
        scope = current()
        return role_permissions(
            role for team_id, held in roles.items() if scope.sees(team_id) for role in held
        )

    def get_all_permissions(self, user_obj: Any, obj: Any = None) -> set[str]:
        if not user_obj.is_active or user_obj.is_anonymous:
            return set()
        if user_obj.is_superuser:
            return super().get_all_permissions(user_obj)
        return {*self.get_user_permissions(user_obj), *self.get_group_permissions(user_obj, obj)}


def scope_with_permission(user: Any, permission: str) -> Any:
    """The current scope narrowed to the teams in which `user` holds `permission` ("review.x"):
    a settings page (policies, tokens, webhooks, exports) shows and changes only those teams'
    rows; new rows go to the scope's team if it is one of them, else to the only one. An org
    admin's scope is kept."""
    from teams.scope import NONE, current, scope_for_teams

    now = current()
    if user.is_superuser:
        return now
    ids = sorted(
        team
        for team, held in roles_of(user).items()
        if now.sees(team) and permission in role_permissions(held)
    )
    if not ids:
        return NONE
    if now.teams is not None and tuple(ids) == now.teams:
        return now
    return scope_for_teams(ids, home=now.home if now.home in ids else None)
