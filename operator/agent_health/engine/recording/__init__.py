"""What a local run records and replays: each (test, repeat) as a ledger cell through the
run's in-process gateway (:mod:`.recording`, its records: :mod:`.runrecord`; a cell that
could not be sealed: :mod:`.refusal`), the run's peers behind that gateway
(:mod:`.peerroutes`), the OTLP receiver of the agents it starts (:mod:`.receiver`), and a
recorded run answering ``agent.run()`` again (:mod:`.replay`, found and checked by
:mod:`.recordings`).
"""

from typing import TYPE_CHECKING

from agent_health import faces

if TYPE_CHECKING:
    from agent_health.engine.recording.peerroutes import Peers
    from agent_health.engine.recording.receiver import Joined, LocalReceiver, gateway_spans
    from agent_health.engine.recording.recording import (
        DEFAULT_ROOT,
        LocalLedger,
        cell_name,
        controller_records,
        default_url,
    )
    from agent_health.engine.recording.recordings import load as load_recording
    from agent_health.engine.recording.recordings import locate
    from agent_health.engine.recording.refusal import unrecorded
    from agent_health.engine.recording.replay import Recording, Replayer, ReplayError
else:
    __getattr__, __dir__ = faces.lazy(
        __name__,
        {
            "Peers": "peerroutes",
            "Joined": "receiver",
            "LocalReceiver": "receiver",
            "gateway_spans": "receiver",
            "DEFAULT_ROOT": "recording",
            "LocalLedger": "recording",
            "cell_name": "recording",
            "controller_records": "recording",
            "default_url": "recording",
            "load_recording": "recordings:load",
            "locate": "recordings",
            "unrecorded": "refusal",
            "Recording": "replay",
            "ReplayError": "replay",
            "Replayer": "replay",
        },
    )

__all__ = [
    "DEFAULT_ROOT",
    "Joined",
    "LocalLedger",
    "LocalReceiver",
    "Peers",
    "Recording",
    "ReplayError",
    "Replayer",
    "cell_name",
    "controller_records",
    "default_url",
    "gateway_spans",
    "load_recording",
    "locate",
    "unrecorded",
]
