"""The demo's support agent: its steps (support.py), its model (llm.py), its crash points; it
runs on the Celery workers through the generic runner (celery_agents), with which apps.py
registers it."""

AGENT = "support"  # the journal's `agent` name for this agent's runs
