"""What ``kernel._urls`` says when it refuses a URL: the rule (``reason``), the code and a
detail a user can act on, for the forms whose refusal another check would also have caught
with a vaguer word. Found by mutation testing (``TESTING.md``): with the IPvFuture or zone-id
check removed, ``[v1.x]`` and ``[fe80::1%25eth0]`` were still refused, as "not an IPv6
address", and no test noticed the message change; an invalid IDNA name's rule token was never
asserted."""

from __future__ import annotations

import pytest

from kernel._urls import URL_INVALID, UrlRefused, read_url


@pytest.mark.parametrize(
    ("url", "reason", "said"),
    [
        pytest.param(
            "http://[v1.fe]/", "ip_form", "IPvFuture literals are refused", id="ipvfuture"
        ),
        pytest.param(
            "http://[V7.x:y]/", "ip_form", "IPvFuture literals are refused", id="IPVFUTURE"
        ),
        pytest.param(
            "http://[fe80::1%25eth0]/", "ip_form", "an IPv6 zone id is refused", id="zone"
        ),
        pytest.param(
            "http://[fe80::\uff11]/", "ip_form", "is not an IPv6 address", id="wide-digit"
        ),
        pytest.param(
            "http://" + "é" * 64 + ".com/", "host", "is not a valid IDNA name", id="idna-long"
        ),
        pytest.param("http://ex%61mple.com/", "host", "", id="encoded-host"),
    ],
)
def test_a_refusal_names_its_rule_and_says_why(url: str, reason: str, said: str) -> None:
    with pytest.raises(UrlRefused) as caught:
        read_url(url)
    assert (caught.value.reason, caught.value.code) == (reason, URL_INVALID)
    assert said in caught.value.detail
    if said.endswith("refused"):  # a fixed sentence: all of it
        assert caught.value.detail == said


def test_the_message_carries_the_detail_the_code_and_the_rule() -> None:
    refused = UrlRefused("ip_form", "an IPv6 zone id is refused")
    assert str(refused) == "an IPv6 zone id is refused [cap.url_invalid: ip_form]"
    assert (refused.reason, refused.detail, refused.code) == (
        "ip_form",
        "an IPv6 zone id is refused",
        URL_INVALID,
    )
