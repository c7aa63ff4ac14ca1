"""output_relevance: is the response aligned with what the query asks?"""

from assay.detectors.base import Detector, Instruction

DETECTOR = Detector(
    name="output_relevance",
    description="Is the response aligned with the intent of the user query, without tangents?",
    instructions=(
        Instruction(
            "core_intent", "Response should directly address the core intent of the user query."
        ),
        Instruction(
            "prioritize_relevant",
            "Response should prioritize information that is specifically relevant to the question asked.",
        ),
        Instruction(
            "no_tangents", "Response should avoid including unrelated or tangential information."
        ),
        Instruction(
            "no_misinterpretation",
            "Response should not misinterpret or distort the meaning of the query.",
        ),
    ),
    required_inputs=("user_query", "generated_text"),
)
