"""The dashboard's shell: who may sign in and what each group may do (roles, the people page,
signing in and out), the audit log of people's actions (`dashboard.audit.audit_record` writes it,
its page reads it), and what every page shares (view helpers, context processors, template tags,
the base layout's pieces). The desk (review/) and the console (console/) are built on it.

Its rows stay in review's tables for now: `review.models.AuditEntry` (which also carries the
dashboard's permissions, `review.<codename>`) and `review.models.LoginFailure`. Moving a model
between apps is a migration of its own, not part of moving code (docs/architecture.md).
"""
