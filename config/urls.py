from django.contrib import admin
from django.http import HttpRequest, JsonResponse
from django.urls import include, path, re_path
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.views import SpectacularAPIView


@csrf_exempt  # a POST to an unknown API path is a 404 envelope, not an HTML CSRF page
def api_not_found(request: HttpRequest, rest: str = "") -> JsonResponse:
    """Unknown API paths (and run ids that are not UUIDs) answer in the API's error envelope."""
    body = {
        "error": {
            "code": "not_found",
            "message": f"No such resource: {request.path}",
            "details": {},
        }
    }
    return JsonResponse(body, status=404)


urlpatterns = [
    path("api/v1/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/v1/", include("tools.urls")),
    path("api/v1/", include("runs.urls")),
    re_path(r"^api/(?P<rest>.*)$", api_not_found),
    path("django-admin/", admin.site.urls),
    path("audit/", include("audit.urls")),
    path("", include("review.urls")),
]
