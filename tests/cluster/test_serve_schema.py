"""The server's 422 is the validation error its own OpenAPI schema documents (no Ray needed: the
exception handler is called as FastAPI calls it, with the errors of the request model).

schemathesis (``bench/reliability.py``) found the defect this guards: the 422's ``ctx`` was
written as a string where the published schema says an object.
"""
from __future__ import annotations

import asyncio
import json

import pytest
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from starlette.requests import Request

from cluster.serve import _invalid_request
from tests.helpers.openapi import validate_response
from tlm.service.api import ScheduleRequest


@pytest.mark.parametrize("raw", [
    '{"tvmscript": "x", "workload_key": "y", "hardware": "cpu-znver4-2c"}',  # a model validator's ValueError
    '{"hardware": "cpu-znver4-2c"}',  # neither: the same validator
    '{"tvmscript": "x", "hardware": "cpu-znver4-2c", "k": 0}',  # a field constraint (ctx: ge)
    '{"tvmscript": "x", "hardware": "cpu-znver4-2c", "colour": "red"}',  # an unknown field
    '{"tvmscript": "x", "hardware": "cpu-znver4-2c", "k": Infinity}',  # non-finite: not JSON on the way back
    '{"tvmscript": "x", "hardware": "cpu-znver4-2c", "rank": NaN}',
])
def test_every_422_is_the_documented_validation_error(raw):
    with pytest.raises(ValidationError) as err:
        ScheduleRequest.model_validate(json.loads(raw))  # Python's json reads Infinity and NaN, as FastAPI's does
    exc = RequestValidationError([{**e, "loc": ("body", *e["loc"])} for e in err.value.errors()])
    r = asyncio.run(_invalid_request(Request({"type": "http", "method": "POST", "path": "/v1/schedules",
                                              "headers": []}), exc))
    assert r.status_code == 422
    body = json.loads(r.body)
    validate_response(body, "422")
    assert all(item["msg"] for item in body["detail"])


@pytest.mark.parametrize("status", [400, 401, 404, 409, 413, 422, 503])
def test_every_error_the_server_answers_is_documented_with_its_shape(status):
    """schemathesis found 400 and 404 answered but not in the schema."""
    import tlm.service.api as api
    from cluster.serve import _http_error

    assert status in api.ERROR_RESPONSES
    r = _http_error(api.ApiError(status, "what was wrong"))
    validate_response(json.loads(r.body), str(status))
