"""One way to write a yes/no value: a setting and a query parameter read the same words the same, or refuse them."""

from __future__ import annotations

import pytest
from aiohttp.test_utils import TestClient

from imagesvc.settings import SettingsError, load_settings

WORDS = {"true": True, "1": True, "yes": True, "on": True, "false": False, "0": False, "no": False, "off": False}


async def test_settings_and_query_parameters_read_the_same_words(client: TestClient) -> None:
    totals = {}
    for flag in (True, False):
        resp = await client.get("/api/books/library", params={"has_translation": str(flag).lower()})
        assert resp.status == 200
        totals[flag] = (await resp.json())["total"]
    assert totals[True] != totals[False]  # the demo library tells the two apart
    for word, meaning in WORDS.items():
        for written in (word, word.upper(), f" {word} "):
            assert load_settings({"IMAGESVC_FAINT_MARK": written}).faint_mark is meaning, written
            assert load_settings({"IMAGESVC_C2PA_SIGN": written}).c2pa_sign is meaning, written
            resp = await client.get("/api/books/library", params={"has_translation": written})
            body = await resp.json()
            assert resp.status == 200, (written, body)
            assert body["total"] == totals[meaning], written


@pytest.mark.parametrize("word", ["nope", "y", "2", "truee", "enabled"])
async def test_other_words_are_refused_naming_the_setting_or_parameter(client: TestClient, word: str) -> None:
    with pytest.raises(SettingsError, match=rf"IMAGESVC_FAINT_MARK='{word}' is not valid: expected one of true"):
        load_settings({"IMAGESVC_FAINT_MARK": word})
    resp = await client.get("/api/books/library", params={"has_translation": word})
    body = await resp.json()
    assert resp.status == 400 and body["error"] == "invalid_request"
    assert "has_translation" in body["message"], body
