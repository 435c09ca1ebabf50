"""The desk's actions: each calls the journal's service and writes its audit entry in one transaction.

Views call these and nothing else for writes, so an action and its audit entry commit together
or not at all. Refusals are runs.api_errors.ApplicationError (code, message, details). One module
per concern, each saying in its docstring which lock its functions expect the caller to hold:
`claims` (who works on a desk item), `resolutions` (decisions on desk items), `runs` (a whole
run's review and limits), `policies` (budget policies, approval rules), `mcp_tools`, `tokens`,
`webhooks` (escalation webhooks and their delivery), `escalations`.
"""
