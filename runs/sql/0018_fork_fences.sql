-- A fork's fences (issue 36): an approval rule may belong to one run (runs_approvalrule.run_id),
-- holding only that run's write intents of the tool. run_fork creates one per tool whose writes
-- already happened in the original after the fork point, unless the admin chose to run them
-- again; the fork's writes of that tool then wait on the desk like any approval.
--
-- Replaces ledger_approval_rule(text, text) (0014) with ledger_approval_rule(text, text, uuid):
-- the run's own rules are read beside the agent's and everyone's, strictest first, a run's own
-- before an agent's before everyone's. ledger_step_intent (0014) is replaced by the migration
-- with the one call changed to pass the run's id (runs/migrations/0018_newcomer_fork_fences.py).

CREATE OR REPLACE FUNCTION ledger_approval_rule(p_agent text, p_name text, p_run uuid)
RETURNS runs_approvalrule
LANGUAGE plpgsql STABLE AS $$
DECLARE
    rule runs_approvalrule;
BEGIN
    SELECT * INTO rule FROM runs_approvalrule ar
    WHERE ar.active AND (ar.run_id IS NULL OR ar.run_id = p_run)
      AND (ar.agent = '' OR ar.agent = p_agent)
      AND p_name LIKE replace(replace(replace(replace(ar.tool_pattern, '\', '\\'), '%', '\%'),
                                              '_', '\_'), '*', '%')
    ORDER BY ar.approvals_required DESC, (ar.run_id IS NULL) ASC, (ar.agent = '') ASC, ar.id
    LIMIT 1;
    RETURN rule;
END
$$;
