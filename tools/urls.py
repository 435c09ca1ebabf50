from django.urls import path

from tools import apis

urlpatterns = [
    path("tools/", apis.ToolListApi.as_view(), name="tools-list"),
    path("tools/<str:name>/invoke", apis.ToolInvokeApi.as_view(), name="tools-invoke"),
    path(
        "idempotency/<path:key>", apis.IdempotencyKeyDetailApi.as_view(), name="idempotency-detail"
    ),
]
