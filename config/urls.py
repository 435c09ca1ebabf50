import threading
from typing import Any

from django.conf import settings
from django.contrib import admin
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.templatetags.static import static
from django.urls import include, path, re_path, reverse
from django.utils.csp import CSP
from django.utils.http import urlencode
from django.views.decorators.csp import csp_override
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.utils import extend_schema
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from console.metrics import metrics_view
from runs.api_errors import error_body


class SchemaView(SpectacularAPIView):
    """The OpenAPI schema, generated one request at a time.

    drf-spectacular resolves its extension classes lazily and not thread-safely; two threads of a
    fresh web worker generating the schema at once could answer 500.
    """

    _generation_lock = threading.Lock()

    # not itself an operation of the API (undecorated, it warns: drf_spectacular.W002)
    @extend_schema(exclude=True)
    def get(self, request: Any, *args: Any, **kwargs: Any) -> HttpResponse:
        with self._generation_lock:
            return super().get(request, *args, **kwargs)


@csrf_exempt  # a POST to an unknown API path is a 404 envelope, not an HTML CSRF page
def api_not_found(request: HttpRequest, rest: str = "") -> JsonResponse:
    """Unknown API paths (and run ids that are not UUIDs) answer in the API's error envelope."""
    return JsonResponse(error_body("not_found", f"No such resource: {request.path}"), status=404)


# Swagger UI (served from our static files) injects one <style> element; this page shows no user
# data, so it alone may use inline styles. Its scripts stay under the site's strict policy.
docs_csp: dict[str, Any] = {**settings.SECURE_CSP, "style-src": [CSP.SELF, CSP.UNSAFE_INLINE]}
api_docs = csp_override(docs_csp)(SpectacularSwaggerSplitView.as_view(url_name="schema"))


def admin_login_redirect(request: HttpRequest) -> HttpResponse:
    """/django-admin/login/ (GET or POST) goes to the dashboard's login, which counts failures and
    locks out; the admin's `next` comes along (the login view only follows same-site ones)."""
    target = (
        reverse("review:login")
        + "?"
        + urlencode({"next": request.GET.get("next") or "/django-admin/"})
    )
    return HttpResponseRedirect(target)


def favicon(request: HttpRequest) -> HttpResponse:
    """Browsers ask for /favicon.ico whatever the page links; send them to the real one."""
    return HttpResponseRedirect(static("review/favicon.svg"))


urlpatterns = [
    path("api/v1/schema/", SchemaView.as_view(), name="schema"),
    path("api/v1/docs/", api_docs, name="api-docs"),
    path("api/v1/", include("tools.urls")),
    path("api/v1/", include("runs.urls")),
    re_path(r"^api/(?P<rest>[\s\S]*)$", api_not_found),
    # one login for both: the admin's own login form would bypass the dashboard's lockout
    path("django-admin/login/", admin_login_redirect),
    path("django-admin/", admin.site.urls),
    path("favicon.ico", favicon),
    path("audit/", include("audit.urls")),
    path("console/", include("console.urls")),
    path("metrics", metrics_view, name="metrics"),
    path("", include("sso.urls")),
    path("", include("review.urls")),
]
