"""The generic Celery runner for agents: a registry of agents by the journal's `agent` name, the
task that runs or resumes one run (`agents.run_agent`), starting a run on the workers, re-dispatching
a resumable run, and the step hooks an agent may offer. An agent's own app registers it here
(`celery_agents.registry.agent_register`, from its AppConfig.ready); this app knows no agent."""
