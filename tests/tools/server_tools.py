"""Named in TOOLS_EXTRA_MODULES by the servers the tool tests start: registers the test tools."""

from tests.tools.fixture_tools import register

register()
