"""The published instruction lists, byte-exact: output_relevance texts end with a period,
completeness texts do not. Shared by the tests that check them."""

OUTPUT_RELEVANCE = [
    "Response should directly address the core intent of the user query.",
    "Response should prioritize information that is specifically relevant to the question asked.",
    "Response should avoid including unrelated or tangential information.",
    "Response should not misinterpret or distort the meaning of the query.",
]
COMPLETENESS = [
    "Response should fully address all aspects of the user query",
    "Response should include all key information explicitly stated in the context documents",
    "Response should not omit critical details needed to understand or answer the query",
    "Response should avoid including incorrect or misleading interpretations of the context",
    "Response should follow a clear and logical structure, making it easy to understand",
    "Response should provide examples or explanations when necessary to clarify complex points",
    "Response should not contradict information in the context or within itself",
    "Response should accurately represent all relevant information without adding irrelevant content",
]
