"""Inference servers' metric names and the PromQL of one serving hour
(docs/conventions.md "Models"; the names' sources: README "Serving: metrics").

Every figure is asked once per hour for all servers together: each server's expression is
labelled ``server=<kind>`` with ``label_replace`` and the servers are joined with ``or``. A
server that renamed a metric lists the names newest first; an older name counts only for pods
that do not expose the newer one (``unless on (namespace, pod)``), so a pod exposing both
(vLLM 0.9-0.10 sends the KV-cache gauge under both names) is not counted twice and histogram
buckets of two names are never mixed.

Series are joined to pods by the ``namespace`` and ``pod`` target labels a Kubernetes scrape
(PodMonitor / ServiceMonitor, or the pod role's relabelling) adds; the servers expose neither.
"""

from __future__ import annotations

from dataclasses import dataclass

from serving.choices import ServerKind

# Label names on server series (target labels of a Kubernetes scrape).
LABEL_NAMESPACE = "namespace"
LABEL_POD = "pod"
LABEL_SERVER = "server"
LABEL_LE = "le"


@dataclass(frozen=True)
class Source:
    """One PromQL selector and how its series of one pod combine: ``sum`` (engines of a vLLM
    data-parallel pod, finish reasons) or ``max`` (Triton models of one request path)."""

    selector: str
    combine: str = "sum"


@dataclass(frozen=True)
class Histogram:
    """A Prometheus histogram by base name (``<name>_bucket``) and what one unit of its ``le``
    is in seconds."""

    name: str
    seconds_per_unit: float = 1.0


@dataclass(frozen=True)
class ServerMetrics:
    """Where each normalized figure comes from on one server; names newest first, an empty
    tuple where the server has no such metric (the figure stays NULL)."""

    kind: str
    presence: tuple[Source, ...]
    requests: tuple[Source, ...] = ()
    prompt_tokens: tuple[Source, ...] = ()
    output_tokens: tuple[Source, ...] = ()
    running: tuple[Source, ...] = ()
    waiting: tuple[Source, ...] = ()
    kv_cache: tuple[Source, ...] = ()
    ttft: tuple[Histogram, ...] = ()
    itl: tuple[Histogram, ...] = ()
    e2e: tuple[Histogram, ...] = ()


# vLLM (vllm/v1/metrics/loggers.py; `vllm:kv_cache_usage_perc` since 0.9, which deprecated
# `vllm:gpu_cache_usage_perc`; `vllm:inter_token_latency_seconds` since 0.11, which deprecated
# `vllm:time_per_output_token_seconds`). Labels: model_name, engine (one per data-parallel
# engine of the pod), finished_reason on request_success.
VLLM = ServerMetrics(
    kind=ServerKind.VLLM,
    presence=(Source("vllm:num_requests_running"),),
    # Finished with reason stop or length: an aborted request (client gone) was not served.
    requests=(Source('vllm:request_success_total{finished_reason!="abort"}'),),
    prompt_tokens=(Source("vllm:prompt_tokens_total"),),
    output_tokens=(Source("vllm:generation_tokens_total"),),
    running=(Source("vllm:num_requests_running"),),
    waiting=(Source("vllm:num_requests_waiting"),),
    kv_cache=(Source("vllm:kv_cache_usage_perc"), Source("vllm:gpu_cache_usage_perc")),
    ttft=(Histogram("vllm:time_to_first_token_seconds"),),
    itl=(
        Histogram("vllm:inter_token_latency_seconds"),
        Histogram("vllm:time_per_output_token_seconds"),
    ),
    e2e=(Histogram("vllm:e2e_request_latency_seconds"),),
)

# NVIDIA NIM for LLMs 1.x (its "Observability" documentation: the vLLM names without the prefix,
# served on /v1/metrics). `request_success_total` counts requests finished with reason stop or
# length (NVIDIA Run:ai's NIM metrics documentation). A NIM that serves vLLM's own `vllm:` names
# is read as vLLM: the same figures.
NIM = ServerMetrics(
    kind=ServerKind.NIM,
    presence=(Source("num_requests_running"),),
    requests=(Source("request_success_total"),),
    prompt_tokens=(Source("prompt_tokens_total"),),
    output_tokens=(Source("generation_tokens_total"),),
    running=(Source("num_requests_running"),),
    waiting=(Source("num_requests_waiting"),),
    kv_cache=(Source("kv_cache_usage_perc"), Source("gpu_cache_usage_perc")),
    ttft=(Histogram("time_to_first_token_seconds"),),
    itl=(Histogram("inter_token_latency_seconds"), Histogram("time_per_output_token_seconds")),
    e2e=(Histogram("e2e_request_latency_seconds"),),
)

# Text Generation Inference (router/src/server.rs, backends/v3/src/{queue,backend}.rs, 3.3):
# no time to first token and no KV-cache gauge. Prompt tokens are the sum of the
# `tgi_request_input_length` histogram (recorded at validation), output tokens the sum of
# `tgi_request_generated_tokens` (recorded per successful request). Its inter-token figure is
# the per-request mean time per token (`inference_time / generated_tokens`, prefill included).
TGI = ServerMetrics(
    kind=ServerKind.TGI,
    presence=(Source("tgi_queue_size"), Source("tgi_batch_current_size")),
    requests=(Source("tgi_request_success"),),
    prompt_tokens=(Source("tgi_request_input_length_sum"),),
    output_tokens=(Source("tgi_request_generated_tokens_sum"),),
    running=(Source("tgi_batch_current_size"),),
    waiting=(Source("tgi_queue_size"),),
    itl=(Histogram("tgi_request_mean_time_per_token_duration"),),
    e2e=(Histogram("tgi_request_duration"),),
)

# Triton Inference Server (docs/user_guide/metrics.md) with the TensorRT-LLM backend
# (tensorrtllm_backend README "Triton Metrics"). An ensemble counts one request at each of its
# models, so requests per pod are the busiest model's, not the sum. Running and waiting come
# from the TensorRT-LLM batch manager, else Triton's pending count; the KV-cache fraction from
# the batch manager's block metrics. Time to first response is a histogram in milliseconds
# that Triton sends only with `--metrics-config histogram_latencies=true`; there is no token
# counter, inter-token or end-to-end histogram (its latencies are cumulative counters).
TRITON = ServerMetrics(
    kind=ServerKind.TRITON,
    presence=(Source("nv_inference_request_success"),),
    requests=(Source("nv_inference_request_success", combine="max"),),
    running=(Source('nv_trt_llm_request_metrics{request_type="active"}'),),
    waiting=(
        Source('nv_trt_llm_request_metrics{request_type="waiting"}'),
        Source("nv_inference_pending_request_count", combine="max"),
    ),
    kv_cache=(Source('nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="fraction"}', "max"),),
    ttft=(Histogram("nv_inference_first_response_histogram_ms", seconds_per_unit=0.001),),
)

SERVERS: tuple[ServerMetrics, ...] = (VLLM, NIM, TGI, TRITON)
SERVERS_BY_KIND: dict[str, ServerMetrics] = {server.kind: server for server in SERVERS}

# Hour figures asked of every server, by the ServerMetrics attribute they read.
COUNTERS: tuple[str, ...] = ("requests", "prompt_tokens", "output_tokens")
GAUGES: tuple[str, ...] = ("running", "waiting")
HISTOGRAMS: tuple[str, ...] = ("ttft", "itl", "e2e")

# kube-state-metrics: GPU requests, owners and the serving pods' workload labels (when
# allowlisted with --metric-labels-allowlist=pods=[leaderworkerset.sigs.k8s.io/name,
# serving.kserve.io/inferenceservice]).
KSM_LABEL_LWS = "label_leaderworkerset_sigs_k8s_io_name"
KSM_LABEL_KSERVE = "label_serving_kserve_io_inferenceservice"
KSM_GPU_RESOURCE_REGEX = "nvidia_com_gpu|nvidia_com_mig_.*"

# Seconds an hour must be over before it is collected: the last scrape of the hour lands in
# Prometheus (and a remote store) after the hour ends.
COLLECT_DELAY_SECONDS = 120
# Complete hours one beat tick collects at most per cluster, oldest first; a longer backlog
# (an outage, a first start) goes on at the next tick.
HOURS_PER_RUN = 6
