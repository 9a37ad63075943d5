"""Answers checked against the server's own OpenAPI schema (what schemathesis checks, in a test)."""
from __future__ import annotations


def validate_response(body: object, status: str, path: str = "/v1/schedules", method: str = "post") -> None:
    """Raise ``jsonschema.ValidationError`` unless ``body`` is what ``method path`` documents for ``status``."""
    import jsonschema

    from cluster.serve import app

    spec = app.openapi()
    schema = spec["paths"][path][method]["responses"][status]["content"]["application/json"]["schema"]
    jsonschema.Draft202012Validator({"components": spec["components"], **schema}).validate(body)
