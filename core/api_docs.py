"""ReDoc for the API schema, with nothing loaded from outside this site.

ReDoc's standalone bundle (from ``drf-spectacular-sidecar``, like Swagger UI) renders its
"API docs by Redocly" footer with an ``<img>`` whose ``src`` is hard-coded to Redocly's CDN,
whatever the options say (``hideLogo`` is about the API's own logo). The page therefore loads a
copy of the bundle in which that one address is replaced by an inline blank image: the same
code, no request to a CDN (which the Content-Security-Policy would also refuse, with a console
error). The copy is made once per process from the installed package; if a new sidecar release
no longer has exactly one such address, the bundle URL answers 500 with the reason logged,
never a silently unpatched bundle.

The page itself is ReDoc's ``<redoc spec-url=…>`` element, read by the bundle on load: no
inline script (CSP), no web fonts (ReDoc falls back to the system's sans-serif).
"""

from __future__ import annotations

import gzip
import hashlib
import logging
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from django.contrib.staticfiles import finders
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import condition, require_safe
from drf_spectacular.views import SpectacularRedocView

logger = logging.getLogger(__name__)

BUNDLE = "drf_spectacular_sidecar/redoc/bundles/redoc.standalone.js"
# The footer logo's address in ReDoc 2.x's bundle (its ``RedoclyLogo`` component).
CDN_LOGO = "https://cdn.redoc.ly/redoc/logo-mini.svg"
# A transparent 1x1 SVG: the footer keeps its layout and its "API docs by Redocly" text.
BLANK_LOGO = "data:image/svg+xml,%3Csvg xmlns='http://www.w3.org/2000/svg' width='1' height='1'/%3E"
# The source map describes the unpatched file; browsers would ask for it next to the copy.
SOURCE_MAP = re.compile(r"\n?//# sourceMappingURL=\S+\s*$")
# Browsers revalidate with the ETag after this (the copy changes only with the package).
MAX_AGE_SECONDS = 3600


@dataclass(frozen=True)
class Bundle:
    text: bytes
    gzipped: bytes
    etag: str


@cache
def redoc_bundle() -> Bundle:
    """The sidecar's ReDoc bundle with the CDN logo replaced (read and patched once)."""
    path = finders.find(BUNDLE)
    if not path:
        raise ImproperlyConfigured(f"{BUNDLE} not found: is drf_spectacular_sidecar installed?")
    source = Path(str(path)).read_text(encoding="utf-8")
    found = source.count(CDN_LOGO)
    if found != 1:
        raise ImproperlyConfigured(
            f"{BUNDLE} names {CDN_LOGO} {found} times, not once: this ReDoc release loads "
            "other outside files; check it before serving it"
        )
    text = SOURCE_MAP.sub("\n", source.replace(CDN_LOGO, BLANK_LOGO)).encode("utf-8")
    return Bundle(text, gzip.compress(text, mtime=0), f'"{hashlib.sha256(text).hexdigest()[:32]}"')


def _etag(request: HttpRequest) -> str:
    return redoc_bundle().etag


@require_safe
@condition(etag_func=_etag)
def redoc_bundle_js(request: HttpRequest) -> HttpResponse:
    """The patched bundle (public, like the other static files), gzipped when accepted."""
    bundle = redoc_bundle()
    if "gzip" in request.headers.get("Accept-Encoding", ""):
        response = HttpResponse(bundle.gzipped, content_type="text/javascript; charset=utf-8")
        response["Content-Encoding"] = "gzip"
    else:
        response = HttpResponse(bundle.text, content_type="text/javascript; charset=utf-8")
    response["Cache-Control"] = f"public, max-age={MAX_AGE_SECONDS}"
    patch_vary_headers(response, ["Accept-Encoding"])
    return response


class RedocView(SpectacularRedocView):
    """ReDoc on the schema, from the patched bundle and a page without inline script."""

    template_name = "front/redoc.html"

    @staticmethod
    def _redoc_standalone() -> str:
        return reverse("api-redoc-bundle")
