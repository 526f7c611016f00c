"""Nothing to register: the plugin (attention_core/harness/plugin/pytest_plugin.py) is loaded through
its ``pytest11`` entry point wherever the package is installed, so this project, and a course's
repository without this file, get the same options and case checks."""
