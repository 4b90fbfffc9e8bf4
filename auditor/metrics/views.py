"""``/metrics/``: Prometheus scrapes it with a read-scope API token.

Not public: pipeline names, topics and error counts are the operators' business. The
same access rule as a read endpoint of the JSON API: a Bearer token (read or write
scope) of a user with the viewer role, or a logged-in viewer's session; anonymous
callers get 401. A Prometheus scrape job::

    scrape_configs:
      - job_name: kafka-auditor
        metrics_path: /metrics/
        authorization:
          type: Bearer
          credentials_file: /etc/prometheus/auditor-token   # created on /api/tokens/, read scope
        static_configs:
          - targets: ["auditor.example.com:8000"]
"""

from __future__ import annotations

from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods

from auditor.accounts.roles import VIEWER
from auditor.api.dispatch import authenticate, error_response
from auditor.api.models import ApiToken
from auditor.api.registry import ApiError, Operation
from auditor.metrics.exposition import CONTENT_TYPE, render
from auditor.metrics.registry import collect_all

# Not registered with the JSON API (this is no JSON endpoint); declared so that the
# API's own authentication, role and scope checks apply unchanged.
ACCESS = Operation(
    path="metrics/",
    method="GET",
    name="metrics",
    summary="Prometheus metrics",
    handler=lambda call: None,
    role=VIEWER,
    scope=ApiToken.READ,
    tag="metrics",
    query=(),
    body=(),
    item=None,
    paginated=False,
)


@login_not_required  # answers 401 itself: a scraper must not be redirected to the login page
@never_cache
@require_http_methods(["GET", "HEAD"])
def metrics(request: HttpRequest) -> HttpResponse:
    try:
        authenticate(request, ACCESS)
    except ApiError as error:
        return error_response(error)
    return HttpResponse(render(collect_all()), content_type=CONTENT_TYPE)
