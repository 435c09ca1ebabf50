"""Every page renders for an admin (who may see all of them) with a waiting item present."""

import pytest

from dashboard.roles import ADMINS


@pytest.mark.django_db
def test_admin_sees_every_page_with_a_waiting_item(client_for, unknown_step):
    client = client_for(ADMINS)
    for url in [
        "/",
        f"/runs/{unknown_step.run_id}/",
        "/queue/",
        f"/queue/{unknown_step.run_id}/{unknown_step.index}/",
        "/policies/",
        "/policies/new",
        "/tokens/",
        "/audit-log/",
        "/password/",
    ]:
        response = client.get(url)
        assert response.status_code == 200, (url, response.content[:2000])
    response = client.get("/queue/")
    assert b"email.send" in response.content
    assert b'id="nav-waiting"' in response.content
