// Starts Swagger UI on the API docs page (templates/ninja/swagger.html). Kept out of the page
// so the Content-Security-Policy needs no inline script.
"use strict";

const settings = JSON.parse(document.getElementById("swagger-settings").textContent);
SwaggerUIBundle({
  ...settings,
  dom_id: "#swagger-ui",
  presets: [SwaggerUIBundle.presets.apis],
  // The badge would send the schema's address to validator.swagger.io.
  validatorUrl: null,
});
