"""completeness: does the response fully cover the query, given the context documents?"""

from assay.detectors.base import Detector, Instruction

DETECTOR = Detector(
    name="completeness",
    description="Does the response fully cover the query using what the context documents state?",
    instructions=(
        Instruction("query_aspects", "Response should fully address all aspects of the user query"),
        Instruction(
            "key_information",
            "Response should include all key information explicitly stated in the context documents",
        ),
        Instruction(
            "no_omissions",
            "Response should not omit critical details needed to understand or answer the query",
        ),
        Instruction(
            "faithful_interpretation",
            "Response should avoid including incorrect or misleading interpretations of the context",
        ),
        Instruction(
            "clear_structure",
            "Response should follow a clear and logical structure, making it easy to understand",
        ),
        Instruction(
            "explains_when_needed",
            "Response should provide examples or explanations when necessary to clarify complex points",
        ),
        Instruction(
            "no_contradiction",
            "Response should not contradict information in the context or within itself",
        ),
        Instruction(
            "accurate_and_focused",
            "Response should accurately represent all relevant information without adding irrelevant content",
        ),
    ),
    required_inputs=("context", "generated_text"),
    optional_inputs=("user_query",),
)
