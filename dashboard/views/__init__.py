"""The shell's views and what every dashboard view shares.

`common`: the permission check, htmx, forms' errors and a service's refusal told to a person,
a list page's POST action. `auth`: signing in and out, the password. `people`: the people page.
`audit_log`: the audit log page.
"""
