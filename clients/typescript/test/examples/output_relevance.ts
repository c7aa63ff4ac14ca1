// The TypeScript example from the published Output Relevance page. Changed: the import line
// ("aimon" -> "@assay/client"). The base URL comes from $ASSAY_BASE_URL, the key from
// $AIMON_API_KEY, both set by test/examples.test.ts.
import Client from "@assay/client";
import dotenv from "dotenv";

dotenv.config();

const aimon = new Client({
  authHeader: `Bearer ${process.env.AIMON_API_KEY}`,
});

const run = async () => {
  const response = await aimon.detect({
    userQuery: "Who wrote Hamlet?",
    generatedText: "William Shakespeare was the author of Hamlet.",
    config: {
      output_relevance: {
        detector_name: "default",
        explain: true,
      },
    },
  });

  console.log("AIMon response:", JSON.stringify(response, null, 2));
};

run();
