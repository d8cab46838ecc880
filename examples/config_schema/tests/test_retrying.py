from retrying import delays, load


def test_the_delays_double_from_the_backoff():
    assert delays({"backoff_s": 0.5, "retries": 3}) == [0.5, 1.0, 2.0]


def test_no_retries_no_delays():
    assert delays({"backoff_s": 0.5, "retries": 0}) == []


def test_the_shipped_settings_load():
    assert load()["service"] == "billing"
