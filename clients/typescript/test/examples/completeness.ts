// The TypeScript example from the published Completeness page. Changed: the import line
// ("aimon" -> "@assay/client"). The base URL comes from $ASSAY_BASE_URL; the test's server
// accepts the example's literal key "API_KEY".
import Client from "@assay/client";

// Create the AIMon client using an API Key (retrievable from the UI in your user profile).
const aimon = new Client({ authHeader: "Bearer API_KEY" });

const runDetect = async () => {
  const generatedText = "your_generated_text";
  const context = ["your_context"];
  const userQuery = "your_user_query";
  const config = { completeness: { detector_name: "default" } };

  // Analyze the quality of the generated output using AIMon
  const response = await aimon.detect(
    generatedText,
    context,
    userQuery,
    config,
  );

  console.log("Response from detect:", response);
}
runDetect();
