"""The LLM policy: asks the model for the next kernel (DSL source) and plan, conditioned on the history."""
from __future__ import annotations

from . import prompts, synthesizer
from .llm import LLMClient, LLMError
from .planner import PlanningContext, PolicyUnavailable, Proposal, Step


class LLMPolicy:
    name = "llm"

    def __init__(self, client: LLMClient, reward_source: str = "", max_bad_replies: int = 3,
                 max_endpoint_errors: int = 1) -> None:
        self.client = client
        self.reward_source = reward_source
        self.max_bad_replies = max_bad_replies
        self.max_endpoint_errors = max_endpoint_errors
        self.endpoint_errors = 0
        self.prompts: list[list[dict[str, str]]] = []   # every request sent (for the trail and tests)

    def propose(self, ctx: PlanningContext, history: list[Step]) -> Proposal | None:
        bad = 0
        for s in reversed(history):
            if s.policy != self.name or s.ok:
                break
            if s.outcome is None:  # a reply that never became a candidate
                bad += 1
        if bad >= self.max_bad_replies:
            raise PolicyUnavailable(f"{bad} replies in a row could not be used")
        msgs = prompts.messages(ctx, history, self.reward_source)
        self.prompts.append(msgs)
        try:
            reply = self.client.chat(msgs, deadline=ctx.deadline)  # a request in flight is cut at the budget
        except LLMError as e:
            self.endpoint_errors += 1
            if self.endpoint_errors >= self.max_endpoint_errors:
                raise PolicyUnavailable(f"LLM endpoint: {e}") from None
            return Proposal(None, rejection=f"the endpoint failed: {e}")
        last = next((s for s in reversed(history) if s.plan is not None), None)
        base = last.plan if last is not None and last.plan is not None else ctx.space.default
        best = max((s for s in history if s.ok), key=lambda s: s.reward, default=None)
        if best is not None and best.plan is not None and (last is None or not last.ok):
            base = best.plan if set(best.plan.knobs) == set(ctx.spec.contract(ctx.problem)) else base
        if set(base.knobs) != set(ctx.spec.contract(ctx.problem)):
            base = ctx.space.default
        cand = synthesizer.from_reply(ctx.spec, ctx.problem, reply, base)
        repair_of = history[-1].index if history and not history[-1].ok else None
        if isinstance(cand, synthesizer.Rejection):
            return Proposal(None, rejection=cand.reason, reply=reply, repair_of=repair_of)
        return Proposal(cand.plan, candidate=cand, reply=reply, repair_of=repair_of,
                        rationale=cand.plan.note or "LLM proposal")
