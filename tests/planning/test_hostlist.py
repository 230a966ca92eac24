"""Host names in few characters: Slurm-style hostlists, else first..last and a count."""

from __future__ import annotations

from tntrun.planning.hostlist import compress_hosts, hosts_summary


def test_consecutive_padded_names_are_one_range():
    names = [f"node{i:04d}" for i in range(1, 1025)]
    assert compress_hosts(names) == "node[0001-1024]"
    assert hosts_summary(names) == "node[0001-1024] (1024 hosts)"


def test_gaps_and_lone_numbers_stay_in_one_bracket_in_their_order():
    names = ["gpu01", "gpu02", "gpu03", "gpu07", "gpu09", "gpu10"]
    assert compress_hosts(names) == "gpu[01-03,07,09-10]"
    assert compress_hosts(["n3", "n1", "n2"]) == "n[3,1-2]"  # the rank order is kept


def test_unpadded_numbers_cross_a_power_of_ten_and_padding_changes_start_a_new_group():
    assert compress_hosts(["n8", "n9", "n10", "n11"]) == "n[8-11]"
    assert compress_hosts(["n09", "n10", "n9"]) == "n[09-10],n9"


def test_prefixes_suffixes_and_names_without_numbers():
    names = ["a1.ib", "a2.ib", "b1", "b2", "login", "c-7"]
    assert compress_hosts(names) == "a[1-2].ib,b[1-2],login,c-7"
    assert compress_hosts(["localhost"]) == "localhost"
    assert hosts_summary(["localhost"]) == "localhost"


def test_names_that_do_not_compress_are_shown_as_first_last_and_count():
    names = [f"{word}-host" for word in ("alpha", "bravo", "charlie", "delta", "echo") * 10]
    summary = hosts_summary(names)
    assert summary == "alpha-host..echo-host (50 hosts)"
    assert hosts_summary(["a", "b"]) == "a,b (2 hosts)"
