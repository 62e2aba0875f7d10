"""Choices of the serving app (docs/conventions.md "Models")."""

from django.db import models


class ServerKind(models.TextChoices):
    """The inference server a workload's pods expose metrics of."""

    VLLM = "vllm", "vLLM"
    NIM = "nim", "NVIDIA NIM for LLMs"
    TGI = "tgi", "Text Generation Inference"
    TRITON = "triton", "Triton / TensorRT-LLM"


class CollectionStatus(models.TextChoices):
    SUCCESS = "success", "Success"
    FAILED = "failed", "Failed"
