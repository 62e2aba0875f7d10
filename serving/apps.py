from django.apps import AppConfig


class ServingConfig(AppConfig):
    name = "serving"
    verbose_name = "Serving: inference deployments' throughput per GPU and capacity plans"
