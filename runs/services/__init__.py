"""Every state change of a run or step, each in one transaction with its Event row.

One module per concern; import from the module, not from this package:
`budgets`, `creation`, `leases`, `recovery`, `steps`, `finish`, `enforcement`, `decisions`,
`actions`, `forks`, `approvals`; `_shared` holds the private moves two of them make. Each
module's docstring says which row locks its caller must (or must not) hold.
"""
