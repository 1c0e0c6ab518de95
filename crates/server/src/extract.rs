//! The JSON body extractor: any failure to read or parse the body becomes an OpenAI error
//! (413 over the size limit, 408 when it does not arrive in time, 400 for malformed JSON). The
//! content type is not checked, as clients differ in what they send.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use serde_json::Value;

use crate::error::ApiError;
use crate::fields::parse_body;
use crate::state::SharedState;

pub struct JsonBody(pub Value);

impl FromRequest<SharedState> for JsonBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &SharedState) -> Result<Self, Self::Rejection> {
        let limit = state.config.body_timeout;
        let read = tokio::time::timeout(limit, Bytes::from_request(req, state));
        let bytes = read.await.map_err(|_| {
            ApiError::timeout(format!(
                "the request body did not arrive within {} s",
                limit.as_secs()
            ))
        })?;
        let bytes = bytes.map_err(|rejection| {
            if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::payload_too_large(state.config.body_limit_bytes)
            } else {
                ApiError::bad_request(format!("cannot read the request body: {rejection}"))
            }
        })?;
        if bytes.is_empty() {
            return Err(ApiError::bad_request(
                "the request body is empty; send a JSON object",
            ));
        }
        parse_body(&bytes).map(JsonBody)
    }
}
