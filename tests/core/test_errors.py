from core.errors import public_summary


def test_it_hides_hosts_ports_urls_addresses_and_paths():
    error = (
        "PrometheusError: HTTPConnectionPool(host='prom.internal.corp', port=9090): Max retries "
        "exceeded with url: /api/v1/query_range (Caused by 10.0.3.7:9090 refused); see "
        "http://prom.internal.corp:9090/graph and /etc/gpuledger/kubeconfig, [fd00::1]:6443, "
        "api.k8s.internal:6443"
    )

    summary = public_summary(error)

    for secret in (
        "prom.internal.corp",
        "9090",
        "10.0.3.7",
        "/etc/gpuledger",
        "fd00::1",
        "api.k8s.internal",
        "query_range",
    ):
        assert secret not in summary
    assert summary.startswith("PrometheusError: HTTPConnectionPool(host=<host>, port=<port>)")
    assert "<url>" in summary and "<path>" in summary and "<address>" in summary


def test_it_keeps_only_the_first_line_and_bounds_the_length():
    assert public_summary("KubeError: 403 Forbidden\nTraceback (most recent call last): ...") == (
        "KubeError: 403 Forbidden"
    )
    assert len(public_summary("x" * 1000)) == 200
    assert public_summary("") == ""
