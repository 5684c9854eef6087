"""Intrinsic functions where moto differs from AWS: ``States.MathRandom``'s end is exclusive.
https://docs.aws.amazon.com/step-functions/latest/dg/intrinsic-functions.html"""

from __future__ import annotations

from ..originals import ORIGINALS


def patch_math_random_end_exclusive() -> None:
    """``States.MathRandom(start, end)``: a random integer from start (inclusive) to end (exclusive).
    https://docs.aws.amazon.com/step-functions/latest/dg/intrinsic-functions.html#asl-intrsc-func-math-operation
    Stock moto's ``randint`` includes the end."""
    import random

    from moto.stepfunctions.parser.asl.component.intrinsic.function.statesfunction.math_operations import (
        math_random,
    )

    cls = math_random.MathRandom
    ORIGINALS.setdefault("math_random", cls._eval_body)

    def _eval_body(self, env):
        self.argument_list.eval(env=env)
        args = env.stack.pop()
        seed = None
        if self.argument_list.size == 3:
            seed = self._validate_integer_value(args.pop(), "seed")
        end = self._validate_integer_value(args.pop(), "end")
        start = self._validate_integer_value(args.pop(), "start")
        env.stack.append(random.Random(seed).randrange(start, end))

    cls._eval_body = _eval_body
