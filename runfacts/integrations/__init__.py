"""`runfacts.integrations`: agent-framework bridges, the framework's approval backed by runfacts.

    from runfacts.integrations.pydantic_ai import Gate, RunfactsApprovals, resume_results   # extra: pydantic-ai
    from runfacts.integrations.langgraph import Gate, RunfactsToolNode                      # extra: langgraph
    from runfacts.integrations.openai_agents import Gate, gated_tools, resume_state        # extra: openai-agents

A bridge proposes a gated tool call to runfacts (`run.propose`) instead of running it, and
resumes from what runfacts recorded (`facts.verdict`), never from the resume value its client
sends. This doorway stays light: it imports no framework; each bridge module imports its own
(and checks its version at import, naming the supported range).

Pure: `facts` (the verdict runfacts' facts give a gated call, the call's runfacts id),
`errors` (`BridgeError`, `ForgedResume`, `IncompatibleFramework`, `OutcomeNotKnown`, `UngatedTool`).
Shells: `pydantic_ai` (a Pydantic AI toolset wrapper and capability, `resume_results`),
`langgraph` (a LangGraph tool node whose gated calls are runfacts proposals, `interrupt()`
while a person decides, results from the dispatcher), `openai_agents` (OpenAI Agents SDK
`needs_approval` tools proposed to runfacts, `resume_state` approving from runfacts' facts).
"""

from runfacts.integrations.errors import (
    BridgeError,
    ForgedResume,
    IncompatibleFramework,
    OutcomeNotKnown,
    UngatedTool,
)
from runfacts.integrations.facts import Verdict, call_id, verdict

__all__ = ["BridgeError", "ForgedResume", "IncompatibleFramework", "OutcomeNotKnown", "UngatedTool", "Verdict",
           "call_id", "verdict"]
