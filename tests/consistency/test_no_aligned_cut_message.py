"""The error of a read across pipelines with no aligned cut names the pipeline that sets
the time plainly (no ``'team_b''s``) and what helps."""

from __future__ import annotations

from datetime import UTC, datetime

from consistency.errors import NoAlignedCutError


def test_the_message_names_the_reference_pipeline_plainly():
    message = str(
        NoAlignedCutError(
            pipeline="team_d",
            tables=["d_words"],
            aligned_at=datetime(2026, 1, 1, tzinfo=UTC),
            reference="team_b",
            reference_epoch=2,
        )
    )
    assert "the barrier of the latest cut of pipeline 'team_b' (epoch 2)" in message
    assert "''" not in message
    assert "run pipeline 'team_b' until it seals a newer epoch" in message
