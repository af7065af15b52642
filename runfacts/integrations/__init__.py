"""`runfacts.integrations`: bridges from agent frameworks to runfacts (issue 19).

Each bridge is a submodule imported by name, so importing this doorway never imports a
framework: `runfacts.integrations.langgraph` (extra `runfacts[langgraph]`).

Pure: none yet. Shells: `langgraph` (a LangGraph tool node whose gated calls are runfacts
proposals, `interrupt()` while a person decides, results from the dispatcher).
"""

__all__: list[str] = []
