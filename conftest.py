pytest_plugins = ["attention_core.harness.pytest_plugin"]
