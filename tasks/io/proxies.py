"""Which GET path and which HTTP proxy the data plane's connections use: ``S3ARCH_GET_PATH``, and
the proxy botocore would send a request to an endpoint through (the client config's ``proxies``,
else HTTPS_PROXY / HTTP_PROXY / NO_PROXY), as awscrt's proxy options.
"""

from __future__ import annotations

import os
import urllib.parse
from dataclasses import dataclass

from s3arch.core.errors import BadArgument


def get_path() -> str:
    """``S3ARCH_GET_PATH``: ``plain`` (the default) or ``crt`` (awscrt's S3 client, to fall back to)."""
    value = os.environ.get("S3ARCH_GET_PATH", "plain").strip().lower() or "plain"
    if value not in ("plain", "crt"):
        raise BadArgument(f"S3ARCH_GET_PATH={value!r} is not a GET path", hint="set it to plain or crt, or unset it")
    return value


@dataclass(frozen=True)
class Proxy:
    """An HTTP proxy for one endpoint, as botocore would use it."""

    url: str  # as configured, password removed
    host: str
    port: int
    username: str | None = None
    password: str | None = None

    def options(self, tunnel: bool):
        from awscrt import http

        auth = http.HttpProxyAuthenticationType.Basic if self.username is not None else \
            http.HttpProxyAuthenticationType.Nothing
        kind = http.HttpProxyConnectionType.Tunneling if tunnel else http.HttpProxyConnectionType.Forwarding
        return http.HttpProxyOptions(self.host, self.port, auth_type=auth, auth_username=self.username,
                                     auth_password=self.password, connection_type=kind)


def proxy_for(tls: bool, host: str, botocore_config=None) -> Proxy | None:
    """The proxy botocore sends requests to ``host`` through: the config's ``proxies`` if it has
    any (an Airflow connection's), else the environment's (HTTPS_PROXY for an HTTPS endpoint,
    HTTP_PROXY for a plain one, NO_PROXY honoured). A proxy this path cannot use is refused."""
    from botocore.httpsession import ProxyConfiguration
    from botocore.utils import get_environ_proxies

    url = f"{'https' if tls else 'http'}://{host}/"
    proxies = getattr(botocore_config, "proxies", None)
    if proxies is None:
        proxies = get_environ_proxies(url)
    proxy_url = ProxyConfiguration(proxies).proxy_url_for(url)
    if not proxy_url:
        return None
    parsed = urllib.parse.urlsplit(proxy_url)
    shown = parsed._replace(netloc=parsed.netloc.rsplit("@", 1)[-1]).geturl()
    if parsed.scheme != "http" or not parsed.hostname:
        # TLS to the proxy itself would need its own trust settings (proxies_config); none of
        # it is wired to the data plane, and a GET that cannot reach S3 would only stall.
        raise BadArgument(f"the proxy {shown} for {url} is not an http:// proxy; s3arch's GETs go through "
                          "http:// proxies only (HTTPS endpoints are tunnelled through them with CONNECT)",
                          hint="give the proxy as http://HOST:PORT in HTTPS_PROXY / HTTP_PROXY or the "
                               "connection's proxies, or exempt the endpoint with NO_PROXY")
    user = urllib.parse.unquote(parsed.username) if parsed.username is not None else None
    password = urllib.parse.unquote(parsed.password or "") if user is not None else None
    return Proxy(shown, parsed.hostname, parsed.port or 80, user, password)
