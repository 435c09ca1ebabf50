from django.urls import URLPattern, path

from audit import views
from console.urls import audit_namespace as run_page_actions

app_name = "audit"

# mounted under /audit/; no empty pattern here, so the dashboard's /audit/ (the audit log) stays
urlpatterns: list[URLPattern] = [
    path("exports/", views.exports, name="exports"),
    path("exports/<uuid:job_id>/", views.export_job, name="export_job"),
    path("evidence/", views.evidence_pack, name="evidence_pack"),
    path("exports/<uuid:job_id>/download", views.export_download, name="export_download"),
    path("runs/<uuid:run_id>/export", views.run_export, name="run_export"),
    *run_page_actions,  # the run page's legal hold (console/urls.py)
    path("checkpoints/", views.checkpoints, name="checkpoints"),
    path("checkpoints/now", views.checkpoint_now, name="checkpoint_now"),
    path("alerts/<int:alert_id>/acknowledge", views.alert_ack, name="alert_ack"),
    path("retention/", views.retention, name="retention"),
    path("incidents/", views.incidents, name="incidents"),
    path("incidents/<int:incident_id>/", views.incident, name="incident"),
]
