from pulsys.platform import PlatformFacts, load_sender
from pulsys.reactor import select_backend


def facts(system):
    return PlatformFacts(system, "6.1", True, system.startswith("linux"), system.startswith("linux"),
                         True, system == "darwin")


def test_backend_defaults_to_selector_everywhere_in_this_build():
    assert select_backend(facts("linux")) == "selector"
    assert select_backend(facts("darwin")) == "selector"


def test_sender_choice_is_a_function_of_the_facts():
    import sys
    name, _ = load_sender(facts(sys.platform), "portable")
    assert name == "portable"
    if sys.platform.startswith("linux"):
        assert load_sender(facts("linux"))[0] == "linux"
    assert load_sender(facts("sunos5"))[0] == "portable"
