"""The serving app's REST API: ``POST /api/v1/capacity-plan/`` (``views.CapacityPlanView``)."""
