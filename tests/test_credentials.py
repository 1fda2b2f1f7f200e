"""core.credentials: a password never survives masking, whatever characters it holds."""

from __future__ import annotations

from urllib.parse import quote

from hypothesis import given, settings
from hypothesis import strategies as st

from askalike.core.credentials import masked_text, masked_url

# passwords as people type them: URL delimiters, percent signs, quotes, spaces, any letter
PASSWORD = st.text(alphabet=st.sampled_from("@:/?&=%#;+ '\"\\aZ9é€") | st.characters(), min_size=1,
                   max_size=24)
NAME = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-", min_size=1, max_size=10)
SCHEME = st.sampled_from(["postgresql", "postgresql+psycopg", "mysql+pymysql", "sqlite"])
TAIL = st.sampled_from(["", "/db", "/db?sslmode=require", ":5432/askalike"])
CHECKS = settings(max_examples=300, deadline=None, derandomize=True)


@CHECKS
@given(scheme=SCHEME, user=NAME, password=PASSWORD, host=NAME, tail=TAIL)
def test_a_password_in_the_user_part_is_hidden_whole(scheme, user, password, host, tail):
    url = f"{scheme}://{user}:{password}@{host}{tail}"
    assert masked_url(url) == f"{scheme}://{user}:***@{host}{tail}"


@CHECKS
@given(name=st.sampled_from(["password", "sslpassword", "token", "secret", "api_key", "PASSWORD"]),
       password=PASSWORD, user=NAME, host=NAME)
def test_a_credential_in_the_query_string_is_hidden(name, password, user, host):
    url = f"postgresql://{user}@{host}/db?sslmode=require&{name}={quote(password, safe='')}&x=1"
    assert masked_url(url) == f"postgresql://{user}@{host}/db?sslmode=require&{name}=***&x=1"


@CHECKS
@given(password=PASSWORD.filter(lambda p: not any(c.isspace() for c in p)), user=NAME, host=NAME,
       before=st.text(max_size=20).filter(lambda t: "://" not in t), after=st.text(max_size=20))
def test_urls_inside_a_message_are_masked(password, user, host, before, after):
    """A driver's message or ours: each URL in it (up to whitespace) is masked."""
    message = f"{before} cannot open postgresql://{user}:{password}@{host}/db: {after}"
    assert f"postgresql://{user}:***@{host}/db:" in masked_text(message)


def test_connection_strings_and_urls_without_passwords():
    assert masked_text("invalid dsn: host=db password='s e c' user=bob") == (
        "invalid dsn: host=db password=*** user=bob")
    assert masked_text("host=db password=abc sslpassword=def") == "host=db password=*** sslpassword=***"
    assert masked_url("postgresql://bob@host/db") == "postgresql://bob@host/db"
    assert masked_url("sqlite:////home/me/q@2024.sqlite3") == "sqlite:////home/me/q@2024.sqlite3"
    assert masked_url("user:pw@host/db") == "user:***@host/db"  # no scheme: still a user part
    assert masked_text("no secrets here: /tmp/a.csv:3") == "no secrets here: /tmp/a.csv:3"
