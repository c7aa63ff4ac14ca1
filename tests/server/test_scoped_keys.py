"""Scoped keys: a key bound to applications publishes, reads, lists and polls jobs only for
them, and hears "not found" about everything else; admin keys see everything."""

from __future__ import annotations

import base64
from pathlib import Path

import httpx
import pytest

from assay.server.process import ServerProcess
from assay.server.settings import load_api_keys, parse_keys_file

from .conftest import LiveServer, ServerFactory, published, relevance_item

ADMIN, TEAM_A, TEAM_B = "admin-key", "team-a-key", "team-b-key"


def as_key(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
def server(make_server: ServerFactory) -> LiveServer:
    running = make_server(
        api_keys=frozenset({ADMIN}),
        scoped_keys={TEAM_A: frozenset({"shop", "shop-eu"}), TEAM_B: frozenset({"bank"})},
    )
    for key, application in ((TEAM_A, "shop"), (TEAM_B, "bank")):
        response = running.post([published(application)], headers=as_key(key))
        assert response.status_code == 200, response.text
    return running


def test_a_scoped_key_cannot_publish_to_another_application(server: LiveServer) -> None:
    response = server.post([published("shop"), published("bank")], headers=as_key(TEAM_A))
    assert response.status_code == 404
    assert response.json() == {
        "message": "[1].application_name: no application 'bank' for this API key",
        "status": 404,
    }
    queued = server.post([published("bank", async_mode=True)], headers=as_key(TEAM_A))
    assert queued.status_code == 404
    # Nothing of the refused request was stored: only the fixture's two detections exist.
    total = server.get("/v1/applications/shop/detections", headers=as_key(ADMIN)).json()["total"]
    assert total == 1


def test_a_scoped_key_may_score_without_publishing(server: LiveServer) -> None:
    response = server.post([relevance_item()], headers=as_key(TEAM_B))
    assert response.status_code == 200
    assert response.json()[0]["output_relevance"]["instructions_list"]


def test_listings_show_only_the_keys_applications(server: LiveServer) -> None:
    def names(key: str) -> list[str]:
        return [app["name"] for app in server.get("/v1/applications", headers=as_key(key)).json()]

    assert names(TEAM_A) == ["shop"]
    assert names(TEAM_B) == ["bank"]
    assert names(ADMIN) == ["bank", "shop"]


@pytest.mark.parametrize("route", ["detections", "metrics"])
def test_another_teams_application_is_not_found(server: LiveServer, route: str) -> None:
    foreign = server.get(f"/v1/applications/bank/{route}", headers=as_key(TEAM_A))
    missing = server.get(f"/v1/applications/bonk/{route}", headers=as_key(TEAM_A))
    assert foreign.status_code == missing.status_code == 404
    # The same words as for an application that does not exist: nothing leaks.
    assert foreign.json()["message"] == missing.json()["message"].replace("bonk", "bank")
    own = server.get(f"/v1/applications/shop/{route}", headers=as_key(TEAM_A))
    assert own.status_code == 200
    assert server.get(f"/v1/applications/bank/{route}", headers=as_key(ADMIN)).status_code == 200


def test_another_teams_job_is_not_found(server: LiveServer) -> None:
    job_id = server.post([published("bank", async_mode=True)], headers=as_key(TEAM_B)).json()[0][
        "job_id"
    ]
    foreign = server.get(f"/v1/jobs/{job_id}", headers=as_key(TEAM_A))
    assert foreign.status_code == 404
    assert foreign.json() == {"message": f"job {job_id!r} not found", "status": 404}
    assert server.get(f"/v1/jobs/{job_id}", headers=as_key(TEAM_B)).status_code == 200
    assert server.get(f"/v1/jobs/{job_id}", headers=as_key(ADMIN)).status_code == 200


def test_the_dashboard_shows_only_the_keys_applications(server: LiveServer) -> None:
    def basic(key: str) -> dict[str, str]:
        return {"Authorization": "Basic " + base64.b64encode(f"me:{key}".encode()).decode()}

    overview = server.get("/", headers=basic(TEAM_A))
    assert overview.status_code == 200
    assert "/applications/shop" in overview.text and "bank" not in overview.text
    assert server.get("/applications/bank", headers=basic(TEAM_A)).status_code == 404
    assert server.get("/applications/shop", headers=basic(TEAM_A)).status_code == 200
    assert "/applications/bank" in server.get("/", headers=basic(ADMIN)).text


def test_keys_file_format() -> None:
    keys = parse_keys_file(
        "# admins\nadmin-1\nadmin-2   *\n\n team-a\tshop, shop-eu\nteam-b bank\n", "keys.txt"
    )
    assert keys.admin == {"admin-1", "admin-2"}
    assert keys.scoped == {"team-a": {"shop", "shop-eu"}, "team-b": {"bank"}}


def test_the_readmes_keys_file_parses() -> None:
    readme = (Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8")
    block = readme.split("**Scoped keys.**")[1].split("```text\n")[1].split("```")[0]
    keys = parse_keys_file(block, "README")
    assert keys.admin == {"ops-key-7f3a", "ops-key-91bc"}
    assert keys.scoped == {"team-a-key-2c": {"shop", "shop-eu"}, "team-b-key-e4": {"bank"}}


def test_a_hash_inside_a_key_is_part_of_it() -> None:
    assert parse_keys_file("key#1  shop  # team a\n").scoped == {"key#1": {"shop"}}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("k1 shop\nk1 bank\n", "keys.txt, line 2: this key is listed twice"),
        ("k1 team/app\n", "keys.txt, line 1: application 'team/app' may hold only"),
        ("k1 shop,,bank\n", "keys.txt, line 1: application '' must be 1 to 100"),
    ],
)
def test_keys_file_mistakes_name_the_line(text: str, message: str) -> None:
    with pytest.raises(ValueError, match="^" + message.replace("(", r"\(")):
        parse_keys_file(text, "keys.txt")


def test_a_keys_file_without_keys_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ASSAY_API_KEYS", raising=False)
    keys_file = tmp_path / "keys.txt"
    keys_file.write_text("# team keys go here\n\n", encoding="utf-8")
    with pytest.raises(ValueError, match="keys.txt' holds no keys"):
        load_api_keys(keys_file)


def test_assay_serve_reads_scoped_keys_from_its_file(tmp_path: Path) -> None:
    keys_file = tmp_path / "keys.txt"
    keys_file.write_text(f"# team keys\n{ADMIN}\n{TEAM_A}  shop\n", encoding="utf-8")
    assert load_api_keys(keys_file).scoped == {TEAM_A: {"shop"}}
    server = ServerProcess(
        f"sqlite:///{tmp_path / 'assay.db'}",
        tmp_path / "server.log",
        api_keys=[],
        extra_args=["--api-keys-file", str(keys_file)],
    )
    with server:
        url = server.url + "/v2/detect"
        own = httpx.post(url, json=[published("shop")], headers=as_key(TEAM_A), timeout=120)
        assert own.status_code == 200
        other = httpx.post(url, json=[published("bank")], headers=as_key(TEAM_A), timeout=120)
        assert other.status_code == 404
        admin = httpx.post(url, json=[published("bank")], headers=as_key(ADMIN), timeout=120)
        assert admin.status_code == 200
