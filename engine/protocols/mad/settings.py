"""``mad``'s own settings (``DebateConfig.mad``), kept with the protocol they configure."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class MadSettings(BaseModel):
    """Liang et al. (MAD): tit-for-tat level (paper Table 11), adaptive break, side swap."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tit_for_tat: int = Field(default=2, ge=0, le=3, description="0 full consensus … 3 disagree always")
    adaptive_break: bool = Field(default=True, description="stop once the moderator has a preference")
    swap_sides: bool = Field(default=False, description="agent 1 argues affirmative, agent 0 negative")
