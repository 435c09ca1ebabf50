from django.apps import AppConfig


class SupportAgentConfig(AppConfig):
    name = "support_agent"
    verbose_name = "Support agent"

    def ready(self) -> None:
        from celery_agents.registry import agent_register
        from support_agent import AGENT

        agent_register(agent=AGENT, runner="support_agent.runners.resume_support")
