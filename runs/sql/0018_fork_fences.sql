-- A fork's fences (issue 36): runs_forkfence holds, per fork, the tools whose writes the
-- original already made after the fork point and the admin chose not to run again
-- (runs.services.run_fork). A write intent of such a tool in that fork waits for a person like
-- any approval; its rule is the one row marked is_fork_fence (never active by itself: it
-- matches nothing on its own).
--
-- Replaces ledger_approval_rule(text, text) (0014) with ledger_approval_rule(text, text, uuid):
-- the rules of the agent and of everyone as before, strictest first; without one, the run's
-- fence. ledger_step_intent (0014) is replaced by the migration with that one call changed to
-- pass the run's id (runs/migrations/0018_newcomer_fork_fences.py).

CREATE OR REPLACE FUNCTION ledger_approval_rule(p_agent text, p_name text, p_run uuid)
RETURNS runs_approvalrule
LANGUAGE plpgsql STABLE AS $$
DECLARE
    rule runs_approvalrule;
BEGIN
    SELECT * INTO rule FROM runs_approvalrule ar
    WHERE ar.active AND (ar.agent = '' OR ar.agent = p_agent)
      AND p_name LIKE replace(replace(replace(replace(ar.tool_pattern, '\', '\\'), '%', '\%'),
                                              '_', '\_'), '*', '%')
    ORDER BY ar.approvals_required DESC, (ar.agent = '') ASC, ar.id
    LIMIT 1;
    IF rule.id IS NULL
       AND EXISTS (SELECT 1 FROM runs_forkfence f WHERE f.run_id = p_run AND f.tool = p_name) THEN
        SELECT * INTO rule FROM runs_approvalrule ar WHERE ar.is_fork_fence;
    END IF;
    RETURN rule;
END
$$;
